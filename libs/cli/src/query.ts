import { parseArgs } from "node:util";
import type { SqlResult } from "@holdfast/analytics";
import { analyticsCall, COMMON_OPTIONS, configFrom } from "./common.js";
import { controlEndpoint, readingToken } from "./control.js";
import { CliError } from "./errors.js";
import { table } from "./format.js";
import { requireStack } from "./stack.js";

export const QUERY_USAGE = `holdfast query "<SQL>" [--json] [--max-rows N] [--data-dir DIR] [--config FILE]

Runs one read statement over the projection, in a ClickHouse session the engine keeps
read-only, within analytics.max_rows (the default for --max-rows), max_execution_ms and
max_memory_bytes. Tables and views:
  steps   one row per finished model call (tokens, cost_usd, latency_ms, status, ...)
  runs    one row per run (steps, tokens, cost, status, first/last seen)
  events  every event as recorded (type, run_id, run_seq, ts, payload JSON)`;

export async function query(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { ...COMMON_OPTIONS, "max-rows": { type: "string" } },
  });
  if (values.help) return void console.log(QUERY_USAGE);
  const sql = positionals.join(" ").trim();
  if (!sql) throw new CliError(`no SQL given\n\n${QUERY_USAGE}`, 2);
  const maxRows = values["max-rows"] === undefined ? undefined : Number(values["max-rows"]);
  if (maxRows !== undefined && !(Number.isInteger(maxRows) && maxRows > 0)) {
    throw new CliError(`--max-rows must be a positive integer, got "${values["max-rows"]}"`, 2);
  }
  const stack = requireStack(configFrom(values));
  const result = await analyticsCall<SqlResult>(
    `${stack.analyticsUrl}/v1/query`,
    readingToken(controlEndpoint(values)),
    {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sql, max_rows: maxRows }),
    },
  );
  if (values.json) return void console.log(JSON.stringify(result.rows, null, 2));
  console.log(
    table(
      result.columns.map((c) => c.name),
      result.rows.map((row) => result.columns.map((c) => cell(row[c.name]))),
    ),
  );
  const n = result.rows.length;
  console.log(
    `\n${n} row${n === 1 ? "" : "s"}${result.truncated ? " (more were cut off; see --max-rows)" : ""}`,
  );
}

function cell(value: unknown): string | number {
  if (typeof value === "number") return value;
  if (value === null || value === undefined) return "NULL";
  return typeof value === "string" ? value : JSON.stringify(value);
}
