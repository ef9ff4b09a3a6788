import type { Analytics } from "./client.js";
import { QueryError, QueryLimitError } from "./errors.js";
import type { QueryLimits } from "./reader.js";
import { canonicalStatement } from "./statement.js";

/** A row of the `runs` view, as `holdfast ls` shows it. */
export interface RunRow {
  run_id: string;
  tag: string;
  tenant: string;
  model: string;
  /** running, idle, held or stopped; a durable run queued, running, finished or failed (or held, stopped). */
  status: string;
  /** Why it is held or stopped ("limit: cost", "operator: <reason>", "rule <id>"); "" otherwise. */
  hold_reason: string;
  held_since: string | null;
  /** Calls parked on gateways now, waiting for a resume or a stop. */
  parked_calls: number;
  steps: number;
  in_flight: number;
  completed: number;
  failed: number;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  cost_usd: number;
  unpriced_steps: number;
  estimated_steps: number;
  first_seen: string;
  last_seen: string;
  /** The agent of a durable run (holdfast.v1.Runs); "" for a run that only calls models. */
  agent: string;
  /** A durable run's steps recorded (its own, not its model calls). */
  durable_steps: number;
}

export const RUN_STATUSES = ["running", "idle", "held", "stopped", "queued", "finished", "failed"] as const;

/** Runs, most recently active first; only those with `status` when given. */
export async function listRuns(
  analytics: Analytics,
  options: { limit: number; status?: (typeof RUN_STATUSES)[number] | undefined },
): Promise<RunRow[]> {
  const result = await analytics.client.query({
    query:
      options.status === undefined
        ? "SELECT * FROM runs ORDER BY last_seen DESC, run_id LIMIT {limit:UInt32}"
        : "SELECT * FROM runs WHERE status = {status:String} ORDER BY last_seen DESC, run_id LIMIT {limit:UInt32}",
    query_params: { limit: options.limit, status: options.status },
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
 * Runs an operator's SQL over the projection, on the reader: one read statement, as the
 * engine parsed it, in a session the engine keeps from writing, under the engine's
 * limits. At most `maxRows` rows come back (never more than the engine's row limit);
 * `truncated` says more were there.
 */
export async function runSql(
  analytics: Analytics,
  sql: string,
  options: { maxRows?: number | undefined } = {},
): Promise<SqlResult> {
  const { reader } = analytics;
  if (reader.refusal !== undefined) throw new QueryError(reader.refusal);
  const maxRows = options.maxRows ?? reader.limits.maxRows;
  if (maxRows > reader.limits.maxRows) {
    throw new QueryError(
      `At most ${reader.limits.maxRows} rows can be asked for (analytics.max_rows); asked for ${maxRows}.`,
    );
  }
  try {
    const canonical = await canonicalStatement(reader, sql);
    const body = await reader.query(canonical);
    return {
      columns: body.meta,
      rows: body.data.slice(0, maxRows),
      truncated: body.data.length > maxRows,
      statistics: body.statistics,
    };
  } catch (error) {
    if (isEngineError(error)) throw engineRefusal(error, reader.limits);
    throw error;
  }
}

// ClickHouse error codes an operator meets on the reader.
const TIMEOUT_EXCEEDED = "159";
const READONLY = "164";
const MEMORY_LIMIT_EXCEEDED = "241";
const TOO_MANY_ROWS_OR_BYTES = "396";
const ACCESS_DENIED = "497";

/** The engine's refusal, said in terms of what Holdfast enforces and where it is configured. */
function engineRefusal(error: EngineError, limits: QueryLimits): QueryError {
  const said = `ClickHouse said: ${error.message.trim()}`;
  switch (error.code) {
    case READONLY:
      return new QueryError(
        `Refused: operator queries are read-only, and this one would write, change the schema or change a setting. ${said}`,
        { cause: error },
      );
    case ACCESS_DENIED:
      return new QueryError(
        `Refused: this query reaches outside the projection (file, url, s3, remote, …) or needs a privilege operator queries do not have. ${said}`,
        { cause: error },
      );
    case TIMEOUT_EXCEEDED:
      return new QueryLimitError(
        `The query ran longer than ${limits.maxExecutionMs} ms (analytics.max_execution_ms) and was stopped.`,
        { cause: error },
      );
    case MEMORY_LIMIT_EXCEEDED:
    case TOO_MANY_ROWS_OR_BYTES:
      return new QueryLimitError(
        `The query needed more than ${limits.maxMemoryBytes} bytes (analytics.max_memory_bytes) and was stopped. ${said}`,
        { cause: error },
      );
    default:
      return new QueryError(error.message, { cause: error });
  }
}

/** An error ClickHouse raised: its numeric code as text, e.g. "164" (READONLY). */
interface EngineError extends Error {
  code: string;
  type: string;
}

// By shape, not class: chDB's connection raises the ClickHouseError of its own bundled
// copy of @clickhouse/client-common, which is not the class this package imports.
function isEngineError(error: unknown): error is EngineError {
  const e = error as Partial<EngineError> | null;
  return error instanceof Error && typeof e?.code === "string" && /^\d+$/.test(e.code);
}
