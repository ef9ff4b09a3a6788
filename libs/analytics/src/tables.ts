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
  /** Decimal text in USD (exact), or null when unknown; as every reader counts it (never below 0). */
  cost_usd: string | null;
  /** Why the cost the log holds was not counted as it is (a negative figure); "" when it was. */
  cost_problem: string;
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
 *
 * The rows go as arrays under one column list (JSONCompactEachRow): ClickHouse reads them
 * without matching each value's name, about a fifth less CPU per row than JSONEachRow on
 * embedded chDB. Every row of a table has every column (the row types have no optional
 * field), in the order of the first row's.
 */
export async function insertRows(
  analytics: Analytics,
  table: ProjectedTable,
  rows: readonly (RawEventRow | StepRow)[],
): Promise<void> {
  if (rows.length === 0) return;
  const columns = Object.keys(rows[0]!) as (keyof (RawEventRow | StepRow))[];
  await analytics.client.insert({
    table,
    columns: columns as [string, ...string[]],
    values: rows.map((row) => columns.map((column) => row[column])),
    // Timestamps go in as epoch milliseconds.
    format: "JSONCompactEachRow",
    // Events carry their own timestamps: a batch spanning more than ClickHouse's default
    // of 100 months (one part each) is still one insert, never one refused for ever.
    clickhouse_settings: { max_partitions_per_insert_block: "0" },
  });
}

/** A row of quarantined_events_v1: an event the projector could not use, as stored. */
export interface QuarantinedRow {
  stream: string;
  stream_seq: number;
  subject: string;
  run_id: string;
  type: string;
  reason: string;
  detail: string;
  data_base64: string;
  bytes: number;
  /** When the log stored it, epoch milliseconds. */
  stored_at: number;
}

/**
 * The last run sequence projected for each of `runIds` from events stored before stream
 * sequence `before` (a run with none is left out): where each run's fold stands when the
 * events from `before` on come to be projected.
 */
export async function readLastRunSequences(
  analytics: Analytics,
  runIds: readonly string[],
  before: number,
): Promise<Map<string, number>> {
  const last = new Map<string, number>();
  if (runIds.length === 0) return last;
  const result = await analytics.client.query({
    query:
      "SELECT run_id, max(run_seq) AS seq FROM raw_events_v2 WHERE run_id IN {runs:Array(String)} AND stream_seq < {before:UInt64} GROUP BY run_id",
    query_params: { runs: runIds, before },
    format: "JSONEachRow",
  });
  for (const row of await result.json<{ run_id: string; seq: number | string }>()) {
    last.set(row.run_id, Number(row.seq));
  }
  return last;
}

/** Records events set aside; recording one again is a no-op by key (stream, stream_seq). */
export async function insertQuarantined(
  analytics: Analytics,
  rows: readonly QuarantinedRow[],
): Promise<void> {
  if (rows.length === 0) return;
  await analytics.client.insert({
    table: "quarantined_events_v1",
    values: rows as unknown[],
    format: "JSONEachRow",
  });
}

/** How many events of `stream` the projection set aside, by reason, and the last one's stream sequence. */
export async function readQuarantined(
  analytics: Analytics,
  stream: string,
): Promise<{ byReason: Map<string, number>; lastSeq: number }> {
  const result = await analytics.client.query({
    query:
      "SELECT reason, count() AS n, max(stream_seq) AS last FROM quarantined_events_v1 FINAL WHERE stream = {stream:String} GROUP BY reason",
    query_params: { stream },
    format: "JSONEachRow",
  });
  const byReason = new Map<string, number>();
  let lastSeq = 0;
  for (const row of await result.json<{ reason: string; n: number | string; last: number | string }>()) {
    byReason.set(row.reason, Number(row.n));
    lastSeq = Math.max(lastSeq, Number(row.last));
  }
  return { byReason, lastSeq };
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
