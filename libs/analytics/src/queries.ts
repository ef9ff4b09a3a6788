import { ClickHouseError } from "@clickhouse/client";
import type { Analytics } from "./client.js";
import { QueryError } from "./errors.js";
import { assertReadOnlyStatement } from "./sql-guard.js";

/** A row of the `runs` view, as `holdfast ls` shows it. */
export interface RunRow {
  run_id: string;
  tag: string;
  model: string;
  status: string;
  steps: number;
  in_flight: number;
  completed: number;
  failed: number;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  cost_usd: number;
  unpriced_steps: number;
  first_seen: string;
  last_seen: string;
}

export async function listRuns(analytics: Analytics, options: { limit: number }): Promise<RunRow[]> {
  const result = await analytics.client.query({
    query: "SELECT * FROM runs ORDER BY last_seen DESC, run_id LIMIT {limit:UInt32}",
    query_params: { limit: options.limit },
    format: "JSONEachRow",
  });
  return result.json<RunRow>();
}

export interface SqlResult {
  columns: { name: string; type: string }[];
  rows: Record<string, unknown>[];
  truncated: boolean;
  /** Rows ClickHouse read to answer, and how long it took. */
  statistics: { elapsed: number; rows_read: number; bytes_read: number } | undefined;
}

/**
 * Runs an operator's SQL over the projection: one read statement only, so the projection
 * cannot be damaged from here. At most `maxRows` rows come back; `truncated` says more
 * were there.
 */
export async function runSql(
  analytics: Analytics,
  sql: string,
  options: { maxRows: number },
): Promise<SqlResult> {
  assertReadOnlyStatement(sql);
  try {
    const result = await analytics.client.query({
      query: sql,
      format: "JSON",
      clickhouse_settings: analytics.readerSettings,
    });
    const body = await result.json<Record<string, unknown>>();
    const rows = body.data as Record<string, unknown>[];
    return {
      columns: body.meta as SqlResult["columns"],
      rows: rows.slice(0, options.maxRows),
      truncated: rows.length > options.maxRows,
      statistics: body.statistics as SqlResult["statistics"],
    };
  } catch (error) {
    if (error instanceof ClickHouseError) throw new QueryError(error.message, { cause: error });
    throw error;
  }
}
