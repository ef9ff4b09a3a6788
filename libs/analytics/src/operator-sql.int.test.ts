import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeTempDir } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Analytics, openAnalytics } from "./client.js";
import { QueryError, QueryLimitError } from "./errors.js";
import { migrate } from "./migrate.js";
import { runSql } from "./queries.js";

// Operator SQL on the embedded engine: what the engine itself refuses, what it limits,
// and that Holdfast's own writes go on meanwhile.

let dir: Awaited<ReturnType<typeof makeTempDir>>;
let analytics: Analytics;

beforeAll(async () => {
  dir = await makeTempDir("operator-sql");
  analytics = await openAnalytics({
    dataDir: join(dir.path, "ch"),
    database: "holdfast",
    limits: { maxRows: 1_000, maxExecutionMs: 1_500, maxMemoryBytes: 200_000_000 },
  });
  await migrate(analytics);
  await analytics.client.command({
    query: "CREATE TABLE IF NOT EXISTS probe (x UInt64) ENGINE = MergeTree ORDER BY x",
  });
  await analytics.client.insert({ table: "probe", values: [{ x: 1 }, { x: 2 }], format: "JSONEachRow" });
});
afterAll(async () => {
  await analytics.close();
  await dir[Symbol.asyncDispose]();
});

/** Everything an attack could change: the tables and how many rows each holds. */
async function snapshot(): Promise<string> {
  const tables = await analytics.client.query({
    query: "SELECT name, total_rows FROM system.tables WHERE database = 'holdfast' ORDER BY name",
    format: "JSONEachRow",
  });
  return JSON.stringify(await tables.json());
}

// Where an INTO OUTFILE would write, known before the temp dir exists.
const OUTFILE = join(tmpdir(), `holdfast-stolen-${process.pid}.txt`);

// Writes, schema changes, setting changes and outside reads, each hidden the ways a
// text guard gets fooled: $$ literals, comments, quoted identifiers, strings.
const ATTACKS: [string, string][] = [
  [
    "a $$ literal hiding a CREATE",
    "SELECT $$'$$; CREATE TABLE pwned (x UInt8) ENGINE = MergeTree ORDER BY x; SELECT '1'",
  ],
  ["a $$ literal hiding an INSERT", "SELECT $$'$$; INSERT INTO probe VALUES (99); SELECT '1'"],
  ["a $$ literal hiding a DROP", "SELECT $tag$'$tag$; DROP TABLE steps_v1; SELECT '1'"],
  ["a comment closing a string", "SELECT '/*'; DROP TABLE probe; -- */'"],
  ["a quoted identifier with a semicolon", 'SELECT 1 AS "a;"; TRUNCATE TABLE probe'],
  ["a backquoted identifier", "SELECT 1 AS `x`; ALTER TABLE probe DELETE WHERE 1"],
  ["a nested comment", "SELECT 1 /* a /* b */ ; DROP TABLE probe; /* */"],
  ["a plain INSERT", "INSERT INTO probe VALUES (3)"],
  ["INSERT … SELECT", "INSERT INTO probe SELECT number FROM numbers(10)"],
  ["CREATE TABLE", "CREATE TABLE pwned (x UInt8) ENGINE = MergeTree ORDER BY x"],
  ["DROP TABLE", "DROP TABLE steps_v1"],
  ["TRUNCATE", "TRUNCATE TABLE probe"],
  ["ALTER … DELETE", "ALTER TABLE probe DELETE WHERE 1"],
  ["OPTIMIZE", "OPTIMIZE TABLE probe FINAL"],
  ["DETACH", "DETACH TABLE probe"],
  ["RENAME", "RENAME TABLE probe TO probe2"],
  ["SET", "SET readonly = 0"],
  ["a SETTINGS clause", "SELECT * FROM probe SETTINGS readonly = 0"],
  ["a SETTINGS clause lifting a limit", "SELECT * FROM probe SETTINGS max_result_rows = 0"],
  ["SYSTEM", "SYSTEM STOP MERGES"],
  ["KILL", "KILL QUERY WHERE 1"],
  ["USE", "USE system"],
  ["CREATE FUNCTION", "CREATE FUNCTION pwn AS (x) -> x"],
  ["a temporary table", "CREATE TEMPORARY TABLE t (x UInt8)"],
  ["file() as a table", "SELECT * FROM file('/etc/hostname', 'LineAsString')"],
  ["file() as a function", "SELECT file('/etc/hostname')"],
  ["file() quoted", "SELECT `file`('/etc/hostname')"],
  ["file() in a subquery", "SELECT * FROM (SELECT file('/etc/hostname') AS f)"],
  // The scalar file() is not access-checked in local mode, so it is refused by name, in
  // every position a name can take: applied to columns, passed to a higher-order function.
  ["file applied to every column", "SELECT * APPLY file FROM (SELECT '/etc/passwd' AS p)"],
  ["file applied, parenthesised", "SELECT * APPLY(file) FROM (SELECT '/etc/passwd' AS p)"],
  ["file as arrayMap's function", "SELECT arrayMap(file, ['/etc/hostname'])"],
  ["file inside a lambda", "SELECT arrayMap(p -> file(p), ['/etc/hostname'])"],
  [
    "file applied to COLUMNS(), reading the environment",
    "SELECT COLUMNS('p') APPLY file FROM (SELECT '/proc/self/environ' AS p)",
  ],
  ["file applied, backquoted", "SELECT * APPLY `file` FROM (SELECT '/etc/hostname' AS p)"],
  ["file applied, double-quoted", "SELECT * APPLY \"file\" FROM (SELECT '/etc/hostname' AS p)"],
  ["file applied, escaped in quotes", "SELECT * APPLY `fil\\x65` FROM (SELECT '/etc/hostname' AS p)"],
  [
    "file applied in a CTE",
    "WITH t AS (SELECT * APPLY file FROM (SELECT '/etc/hostname' AS p)) SELECT * FROM t",
  ],
  ["file applied in EXPLAIN", "EXPLAIN SYNTAX SELECT * APPLY file FROM (SELECT '/etc/hostname' AS p)"],
  ["file by a relative path", "SELECT * APPLY file FROM (SELECT '../../../../../../etc/hostname' AS p)"],
  [
    "eval(), a query built from a string",
    "SELECT * FROM eval(concat('SELECT fi', 'le(\\'/etc/hostname\\')'))",
  ],
  ["INTO OUTFILE with APPEND", `SELECT 1 INTO OUTFILE '${OUTFILE}' APPEND`],
  ["url()", "SELECT * FROM url('http://127.0.0.1:9/x', 'LineAsString')"],
  ["s3()", "SELECT * FROM s3('http://127.0.0.1:9/bucket/x.csv', 'CSV', 'a String')"],
  ["remote()", "SELECT * FROM remote('127.0.0.1:9', system.one)"],
  ["executable()", "SELECT * FROM executable('date', 'LineAsString', 'x String')"],
  ["mysql()", "SELECT * FROM mysql('127.0.0.1:9', 'db', 't', 'u', 'p')"],
  ["INTO OUTFILE", `SELECT * FROM probe INTO OUTFILE '${OUTFILE}'`],
  ["INTO OUTFILE on SHOW", `SHOW TABLES INTO OUTFILE '${OUTFILE}'`],
  ["INSERT INTO FUNCTION file", `INSERT INTO FUNCTION file('${OUTFILE}', 'CSV') SELECT 1`],
];

describe("operator SQL on the embedded engine", () => {
  it.each(ATTACKS)("refuses %s and changes nothing", async (_case, sql) => {
    const before = await snapshot();
    await expect(runSql(analytics, sql)).rejects.toBeInstanceOf(QueryError);
    expect(await snapshot()).toBe(before);
    expect(existsSync(OUTFILE)).toBe(false);
  });

  it("still reads after every refusal, and tells a literal from a statement", async () => {
    const result = await runSql(
      analytics,
      "SELECT count() AS n, 'DROP TABLE probe; file(' AS text, $$;INSERT$$ AS heredoc FROM probe -- ; DROP TABLE probe",
    );
    expect(result.rows).toEqual([{ n: 2, text: "DROP TABLE probe; file(", heredoc: ";INSERT" }]);
    const tables = await runSql(analytics, "SHOW TABLES");
    expect(tables.rows.map((r) => r.name)).toContain("probe");
  });

  it("is enforced by the engine itself: the reader session refuses writes and outside sources without any statement check", async () => {
    // Sent as the client sends any query (it appends FORMAT JSON to the last statement), so
    // each write goes first in a multi-statement the engine runs in order.
    for (const write of ["INSERT INTO probe VALUES (7)", "DROP TABLE probe", "SET max_result_rows = 0"]) {
      await expect(analytics.reader.query(`${write}; SELECT 1`)).rejects.toThrow(/readonly/i);
    }
    await expect(
      analytics.reader.query("SELECT * FROM file('/etc/hostname', 'LineAsString')"),
    ).rejects.toThrow(/privileges|readonly/i);
    // Even Holdfast's own connection, which may write, cannot reach outside the database.
    await expect(
      analytics.client.query({ query: "SELECT * FROM url('http://127.0.0.1:9/x', 'LineAsString')" }),
    ).rejects.toThrow(/privileges/i);
    expect((await analytics.reader.query("SELECT count() AS n FROM probe")).data).toEqual([{ n: 2 }]);
  });

  it("answers an endless query with the rows asked for, fast, the engine stopping at its row limit", async () => {
    const result = await runSql(analytics, "SELECT number FROM system.numbers", { maxRows: 3 });
    expect(result.rows).toEqual([{ number: 0 }, { number: 1 }, { number: 2 }]);
    expect(result.truncated).toBe(true);
    const capped = await runSql(analytics, "SELECT number FROM system.numbers");
    expect(capped.rows).toHaveLength(1_000);
    expect(capped.truncated).toBe(true);
  });

  it("refuses to return more rows than analytics.max_rows", async () => {
    await expect(runSql(analytics, "SELECT 1", { maxRows: 1_001 })).rejects.toThrow(/analytics\.max_rows/);
  });

  it("stops a query at analytics.max_execution_ms and says so", async () => {
    const error = await runSql(analytics, "SELECT count() FROM numbers_mt(100000000000000)").catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(QueryLimitError);
    expect((error as Error).message).toMatch(/1500 ms \(analytics\.max_execution_ms\)/);
  });

  it("stops a query at analytics.max_memory_bytes and says so, and the next answer is whole", async () => {
    const error = await runSql(analytics, "SELECT groupArray(number) FROM numbers(1000000000)").catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(QueryLimitError);
    expect((error as Error).message).toMatch(/200000000 bytes \(analytics\.max_memory_bytes\)/);
    // chDB hands a failed query's partial output to the next query on its connection;
    // the reader replaces the connection, so this answer is exactly its own.
    expect((await runSql(analytics, "SELECT 42 AS answer")).rows).toEqual([{ answer: 42 }]);
  });

  it("keeps Holdfast's own writes going while an operator query runs", async () => {
    const slow = runSql(analytics, "SELECT count() FROM numbers_mt(100000000000000)").catch(
      (e: unknown) => e,
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    let settledBeforeInserts = false;
    void slow.then(() => {
      settledBeforeInserts = true;
    });
    await analytics.client.insert({ table: "probe", values: [{ x: 3 }], format: "JSONEachRow" });
    // The insert landed while the operator query was still running.
    expect(settledBeforeInserts).toBe(false);
    expect(await slow).toBeInstanceOf(QueryLimitError);
    expect((await runSql(analytics, "SELECT count() AS n FROM probe")).rows).toEqual([{ n: 3 }]);
  });
});
