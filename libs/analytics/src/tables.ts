import type { Analytics } from "./client.js";
import { ProjectionMismatchError } from "./errors.js";

/** A row of raw_events_v2 (the `events` view). Timestamps are epoch milliseconds. */
export interface RawEventRow {
  event_id: string;
  type: string;
  schema_version: number;
  run_id: string;
  run_seq: number;
  stream_seq: number;
  ts: number;
  tag: string;
  tenant: string;
  payload: string;
}

/** A row of steps_v2 (the `steps` view): one finished model call. */
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
  cache_write_tokens: number;
  reasoning_tokens: number;
  /** Decimal text in USD (exact), or null when unknown. */
  cost_usd: string | null;
  /** The cost is Holdfast's estimate: its usage was (usage_estimate), or its model was unpriced (unknown_price). */
  estimated: boolean;
  /** Why the usage is Holdfast's estimate: "gateway_lost", "invalid", "missing", "partial"; "" when it is the provider's. */
  usage_estimate: string;
  /** What was wrong with the provider's usage report; "" when nothing was. */
  usage_problem: string;
  /** Charged at pricing.unknown_usd_per_mtok: the model had no price, and a cost limit or budget applied. */
  unknown_price: boolean;
  response_id: string;
  tenant: string;
  latency_ms: number;
  first_byte_ms: number;
  finish_reason: string;
  tool_calls: string[];
  finished_at: number;
  event_id: string;
  stream_seq: number;
}

export type ProjectedTable = "raw_events_v2" | "steps_v2";

/** Exact decimal text for a cost in billionths of a dollar. */
export function nanoUsdToDecimal(nanoUsd: number): string {
  const sign = nanoUsd < 0 ? "-" : "";
  const abs = Math.abs(Math.trunc(nanoUsd));
  const whole = Math.floor(abs / 1e9);
  const frac = String(abs % 1e9).padStart(9, "0");
  return `${sign}${whole}.${frac}`;
}

/**
 * Inserts rows as they are. Inserting a row again is a no-op by key: the tables fold rows
 * of the same event into one (ReplacingMergeTree) and every view reads them FINAL. One
 * INSERT is one part per month it touches, so it can land in part; the checkpoint, not
 * the rows, says what is complete.
 */
export async function insertRows(
  analytics: Analytics,
  table: ProjectedTable,
  rows: readonly (RawEventRow | StepRow)[],
): Promise<void> {
  if (rows.length === 0) return;
  await analytics.client.insert({
    table,
    values: rows as unknown[],
    // Timestamps go in as epoch milliseconds.
    format: "JSONEachRow",
  });
}

/** One partition of the log: a stream and the subjects its consumer reads. */
export interface CheckpointKey {
  stream: string;
  subjects: string;
}

/**
 * The projector's checkpoint: every event of the partition at or below this stream
 * sequence is in every projected table. 0 when nothing is known to be (a new database,
 * or one migrated from the v1 tables, which the projector then replays from the start).
 */
export async function readCheckpoint(analytics: Analytics, key: CheckpointKey): Promise<number> {
  const result = await analytics.client.query({
    query:
      "SELECT max(seq) AS seq FROM projection_checkpoints WHERE stream = {stream:String} AND subjects = {subjects:String}",
    query_params: { stream: key.stream, subjects: key.subjects },
    format: "JSONEachRow",
  });
  const rows = await result.json<{ seq: number | string }>();
  return Number(rows[0]?.seq ?? 0);
}

/** Records that everything of the partition up to `seq` is projected. Write it only once that is true. */
export async function writeCheckpoint(analytics: Analytics, key: CheckpointKey, seq: number): Promise<void> {
  await analytics.client.insert({
    table: "projection_checkpoints",
    values: [{ stream: key.stream, subjects: key.subjects, seq }],
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
