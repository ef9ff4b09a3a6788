import type { Analytics } from "./client.js";
import { ProjectionMismatchError } from "./errors.js";

/** A row of raw_events_v1. Timestamps are epoch milliseconds. */
export interface RawEventRow {
  event_id: string;
  type: string;
  schema_version: number;
  run_id: string;
  run_seq: number;
  stream_seq: number;
  ts: number;
  tag: string;
  payload: string;
}

/** A row of steps_v1: one finished model call. */
export interface StepRow {
  step_id: string;
  run_id: string;
  step: number;
  tag: string;
  api: string;
  model: string;
  stream: boolean;
  status: "completed" | "failed";
  failure_reason: string;
  upstream_status: number;
  error_type: string;
  error_code: string;
  usage_reported: boolean;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
  /** Decimal text in USD (exact), or null when unknown. */
  cost_usd: string | null;
  latency_ms: number;
  first_byte_ms: number;
  finish_reason: string;
  tool_calls: string[];
  finished_at: number;
  event_id: string;
  stream_seq: number;
}

export type ProjectedTable = "raw_events_v1" | "steps_v1";

/** Exact decimal text for a cost in billionths of a dollar. */
export function nanoUsdToDecimal(nanoUsd: number): string {
  const sign = nanoUsd < 0 ? "-" : "";
  const abs = Math.abs(Math.trunc(nanoUsd));
  const whole = Math.floor(abs / 1e9);
  const frac = String(abs % 1e9).padStart(9, "0");
  return `${sign}${whole}.${frac}`;
}

/**
 * The highest stream sequence a table holds: everything at or below it is already
 * projected there. This is the projector's checkpoint, kept in the same place as the
 * rows so the two can never disagree.
 */
export async function highWater(analytics: Analytics, table: ProjectedTable): Promise<number> {
  const result = await analytics.client.query({
    query: `SELECT max(stream_seq) AS seq FROM ${table}`,
    format: "JSONEachRow",
  });
  const rows = await result.json<{ seq: number | string }>();
  return Number(rows[0]?.seq ?? 0);
}

export async function insertRows(
  analytics: Analytics,
  table: ProjectedTable,
  rows: readonly (RawEventRow | StepRow)[],
): Promise<void> {
  if (rows.length === 0) return;
  await analytics.client.insert({
    table,
    values: rows as unknown[],
    // One INSERT is one block here (batches are far below max_insert_block_size), so a
    // batch lands whole or not at all. Timestamps go in as epoch milliseconds.
    format: "JSONEachRow",
  });
}

/** The event stream a projection is built from: its name and when it was created. */
export interface ProjectionSource {
  stream: string;
  created: string;
}

/**
 * Binds this database to one event stream on first use, and afterwards refuses any other:
 * stream sequences (the checkpoints) only mean something within the stream they came from.
 */
export async function bindProjection(analytics: Analytics, source: ProjectionSource): Promise<void> {
  const result = await analytics.client.query({
    query: "SELECT stream, stream_created FROM projection_source FINAL",
    format: "JSONEachRow",
  });
  const bound = await result.json<{ stream: string; stream_created: string }>();
  if (bound.length === 0) {
    await analytics.client.insert({
      table: "projection_source",
      values: [{ stream: source.stream, stream_created: source.created }],
      format: "JSONEachRow",
    });
    return;
  }
  const match =
    bound.length === 1 && bound[0]?.stream === source.stream && bound[0]?.stream_created === source.created;
  if (!match) {
    const was = bound.map((b) => `${b.stream} (created ${b.stream_created})`).join(", ");
    throw new ProjectionMismatchError(
      `ClickHouse database ${analytics.database} is the projection of ${was}, not of ${source.stream} (created ${source.created}). ` +
        "Set clickhouse.database to another database for this event stream.",
    );
  }
}
