import { describe, expect, it } from "vitest";
import { assertReadOnlyStatement } from "./sql-guard.js";

describe("operator query guard", () => {
  it.each([
    "SELECT 1",
    "  select count() from steps;  ",
    "WITH x AS (SELECT 1) SELECT * FROM x",
    "(SELECT 1) UNION ALL (SELECT 2)",
    "SHOW TABLES",
    "DESCRIBE steps",
    "EXPLAIN SELECT 1",
    "SELECT ';' AS semi, 'DROP TABLE x' AS s -- ; DROP TABLE y",
    "SELECT 1 /* ; INSERT */",
    "SELECT `we;ird` FROM steps",
  ])("accepts one read statement: %s", (sql) => {
    expect(() => assertReadOnlyStatement(sql)).not.toThrow();
  });

  it.each([
    ["INSERT INTO steps_v1 VALUES (1)", /starts with INSERT/],
    ["DROP TABLE steps_v1", /starts with DROP/],
    ["ALTER TABLE steps_v1 DELETE WHERE 1", /starts with ALTER/],
    ["SET readonly = 0", /starts with SET/],
    ["SELECT 1; DROP TABLE steps_v1", /one statement/],
    ["SELECT 'a'';'; TRUNCATE steps", /one statement/],
    ["SELECT 1 INTO OUTFILE '/tmp/x'", /OUTFILE/],
    ["   ", /empty/],
    ["-- only a comment", /empty/],
  ])("refuses %s", (sql, message) => {
    expect(() => assertReadOnlyStatement(sql)).toThrow(message);
  });
});
