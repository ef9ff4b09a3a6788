import { QueryError } from "./errors.js";

const READ_STATEMENTS = new Set(["SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS"]);

/**
 * Accepts exactly one read statement. Literals, quoted identifiers and comments are
 * blanked out first, so a ";" or a keyword inside them does not count. This is what keeps
 * the embedded engine (which runs several ";"-separated statements in one call) from
 * being written to through the operator query path.
 */
export function assertReadOnlyStatement(sql: string): void {
  const code = blankLiteralsAndComments(sql).trim().replace(/;\s*$/, "");
  if (code.length === 0) throw new QueryError("The query is empty.");
  if (code.includes(";")) throw new QueryError("Only one statement per query is allowed.");
  const first = /^[(\s]*([A-Za-z]+)/.exec(code)?.[1]?.toUpperCase();
  if (first === undefined || !READ_STATEMENTS.has(first)) {
    throw new QueryError(
      `Only read queries are allowed here (${[...READ_STATEMENTS].join(", ")}); this one starts with ${first ?? "something else"}.`,
    );
  }
  if (/\bINTO\s+OUTFILE\b/i.test(code)) throw new QueryError("INTO OUTFILE is not allowed here.");
}

function blankLiteralsAndComments(sql: string): string {
  let out = "";
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    const next = sql[i + 1];
    if (c === "-" && next === "-") {
      const end = sql.indexOf("\n", i);
      i = end === -1 ? sql.length : end;
    } else if (c === "#" && (next === " " || next === "!")) {
      const end = sql.indexOf("\n", i);
      i = end === -1 ? sql.length : end;
    } else if (c === "/" && next === "*") {
      const end = sql.indexOf("*/", i + 2);
      i = end === -1 ? sql.length : end + 2;
      out += " ";
    } else if (c === "'" || c === '"' || c === "`") {
      let j = i + 1;
      while (j < sql.length) {
        if (sql[j] === "\\") j += 2;
        else if (sql[j] === c && sql[j + 1] === c) j += 2;
        else if (sql[j] === c) break;
        else j += 1;
      }
      out += " x ";
      i = j + 1;
    } else {
      out += c;
      i += 1;
    }
  }
  return out;
}
