import { QueryError } from "./errors.js";
import type { Reader } from "./reader.js";

// Marks a quoted identifier's name, so it is never mistaken for a keyword.
const QUOTED = "\u0000";
const READ_STATEMENTS = new Set(["SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS"]);

/**
 * The operator's SQL as ClickHouse itself parses it: one statement, formatted by the
 * engine's own parser (`formatQuerySingleLine`, with the text bound as a parameter, so it
 * is parsed and never run). Several statements, however they hide (in comments, `$$`
 * literals, quoted identifiers), are the engine's syntax error, not a guess of ours. The
 * canonical text has no comments and quotes every literal one way, and it is what runs:
 * what was checked is what executes.
 */
export async function canonicalStatement(reader: Reader, sql: string): Promise<string> {
  if (sql.trim().replace(/;\s*$/, "").length === 0) throw new QueryError("The query is empty.");
  const answer = await reader.query("SELECT formatQuerySingleLine({sql:String}) AS canonical", { sql });
  const canonical = answer.data[0]?.canonical;
  if (typeof canonical !== "string") throw new QueryError("ClickHouse could not read the query.");
  assertReadStatement(canonical);
  return canonical;
}

/**
 * Refuses, by the kind of statement the engine parsed, what a read-only session does not
 * stop by itself on the embedded engine (which runs in ClickHouse's local mode, as one
 * user): any statement but a read (KILL, SYSTEM, USE included), `INTO OUTFILE` (written
 * by the local client, not checked by the engine), and the `file()` function (local mode
 * reads any path). Writes, schema and settings changes and outside sources are refused
 * by the engine itself. Takes the canonical text `canonicalStatement` produced.
 */
export function assertReadStatement(canonical: string): void {
  const tokens = codeTokens(canonical);
  const first = tokens.find((t) => t !== "(")?.toUpperCase();
  if (first === undefined || !READ_STATEMENTS.has(first)) {
    throw new QueryError(
      `Only read queries are allowed here (${[...READ_STATEMENTS].join(", ")}); this one is ${first ?? "empty"}.`,
    );
  }
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i]!.toUpperCase();
    if (token === "INTO" && tokens[i + 1]?.toUpperCase() === "OUTFILE") {
      throw new QueryError("INTO OUTFILE is not allowed here: the result comes back to you, not to a file.");
    }
    if ((token === "FILE" || token === `${QUOTED}FILE`) && tokens[i + 1] === "(") {
      throw new QueryError(
        "file() reads the machine's files; operator queries may only read the projection.",
      );
    }
  }
}

/**
 * Words, quoted identifiers and single punctuation of canonical SQL, string literals
 * dropped. Canonical text has no comments, and quotes strings with '…' and identifiers
 * with `…` or "…", escaping with a backslash.
 */
function codeTokens(sql: string): string[] {
  const tokens: string[] = [];
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    if (c === "'" || c === "`" || c === '"') {
      let j = i + 1;
      while (j < sql.length && sql[j] !== c) j += sql[j] === "\\" ? 2 : 1;
      // A quoted identifier is still a name (`file`(…) calls file()); a string is nothing.
      if (c !== "'") tokens.push(`${QUOTED}${sql.slice(i + 1, j).replace(/\\(.)/g, "$1")}`);
      i = j + 1;
    } else if (/[A-Za-z_]/.test(c)) {
      let j = i + 1;
      while (j < sql.length && /[A-Za-z0-9_]/.test(sql[j]!)) j++;
      tokens.push(sql.slice(i, j));
      i = j;
    } else {
      if (!/\s/.test(c)) tokens.push(c);
      i += 1;
    }
  }
  return tokens;
}
