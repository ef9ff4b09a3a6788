import { QueryError } from "./errors.js";
import type { Reader } from "./reader.js";

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
 * Names an operator query may not use at all, in any position: called, applied to
 * columns (`APPLY file`), handed to a higher-order function (`arrayMap(file, …)`), as a
 * table function or an alias. Refused by name because no grant or setting of the
 * embedded engine stops them:
 * - `file`: the scalar function reads any path in ClickHouse's local mode (chDB), which
 *   skips its `user_files_path` check there; grants cover only the table function, and a
 *   built-in cannot be shadowed by a user-defined function;
 * - `eval`: runs a query built from a string, which no check of the text can see.
 *   The reader pins it off too (reader.ts); this keeps it off if a chDB turns it on.
 */
const FORBIDDEN_NAMES = new Map([
  ["FILE", "file reads the machine's files; operator queries may only read the projection"],
  ["EVAL", "eval runs a query built from a string, which cannot be checked before it runs"],
]);

/**
 * Refuses, by the kind of statement the engine parsed, what a read-only session does not
 * stop by itself on the embedded engine (which runs in ClickHouse's local mode, as one
 * user): any statement but a read (KILL, SYSTEM, USE included), `INTO OUTFILE` (written
 * by the local client, not checked by the engine), and any use of a forbidden name. The
 * canonical text spells each name one way (the formatter undoes quoting and escapes), so
 * a name is found whatever spelling the operator used. Writes, schema and settings
 * changes and outside sources are refused by the engine itself. Takes the canonical text
 * `canonicalStatement` produced.
 */
export function assertReadStatement(canonical: string): void {
  const tokens = codeTokens(canonical);
  const first = tokens.find((t) => t.text !== "(")?.text.toUpperCase();
  if (first === undefined || !READ_STATEMENTS.has(first)) {
    throw new QueryError(
      `Only read queries are allowed here (${[...READ_STATEMENTS].join(", ")}); this one is ${first ?? "empty"}.`,
    );
  }
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i]!;
    const upper = token.text.toUpperCase();
    if (!token.quoted && upper === "INTO" && tokens[i + 1]?.text.toUpperCase() === "OUTFILE") {
      throw new QueryError("INTO OUTFILE is not allowed here: the result comes back to you, not to a file.");
    }
    const forbidden = token.name ? FORBIDDEN_NAMES.get(upper) : undefined;
    if (forbidden !== undefined) {
      throw new QueryError(`The name ${token.text} is not allowed in operator queries: ${forbidden}.`);
    }
  }
}

/** A token of canonical SQL: a name (bare word or quoted identifier) or punctuation. */
interface Token {
  text: string;
  /** A word or a quoted identifier, which can name a function, a table or a column. */
  name: boolean;
  quoted: boolean;
}

/**
 * Words, quoted identifiers and single punctuation of canonical SQL, string literals
 * dropped. Canonical text has no comments, and quotes strings with '…' and identifiers
 * with `…` or "…", escaping with a backslash.
 */
function codeTokens(sql: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    if (c === "'" || c === "`" || c === '"') {
      let j = i + 1;
      while (j < sql.length && sql[j] !== c) j += sql[j] === "\\" ? 2 : 1;
      // A quoted identifier is still a name (`file`(…) calls file()); a string is nothing.
      if (c !== "'")
        tokens.push({ text: sql.slice(i + 1, j).replace(/\\(.)/g, "$1"), name: true, quoted: true });
      i = j + 1;
    } else if (/[A-Za-z_]/.test(c)) {
      let j = i + 1;
      while (j < sql.length && /[A-Za-z0-9_]/.test(sql[j]!)) j++;
      tokens.push({ text: sql.slice(i, j), name: true, quoted: false });
      i = j;
    } else {
      if (!/\s/.test(c)) tokens.push({ text: c, name: false, quoted: false });
      i += 1;
    }
  }
  return tokens;
}
