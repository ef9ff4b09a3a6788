import { nanoUsdToDecimal, type RawEventRow, type StepRow } from "@holdfast/analytics";
import type { StoredEvent } from "@holdfast/bus";
import {
  apiName,
  envelopeToJson,
  failureReasonName,
  isKnown,
  type StepOutcome,
  stepCostNanoUsd,
  usageEstimateName,
} from "@holdfast/events";

/** The rows one event becomes. Pure: the same event always gives the same rows. */
export interface ProjectedRows {
  raw: RawEventRow;
  step: StepRow | undefined;
}

export function project({ envelope, streamSequence }: StoredEvent): ProjectedRows {
  const raw: RawEventRow = {
    event_id: envelope.id,
    type: envelope.type,
    schema_version: envelope.schemaVersion,
    run_id: envelope.runId,
    run_seq: envelope.sequence,
    stream_seq: streamSequence,
    ts: envelope.timestampMs,
    tag: envelope.tag,
    tenant: envelope.tenant,
    // The payload in its proto3 JSON form (camelCase fields), e.g. {"stepId": ..., "model": ...};
    // an event of a type this version does not know keeps its place with an empty payload.
    payload: isKnown(envelope)
      ? JSON.stringify(envelopeToJson(envelope)[envelope.payload.$case] ?? {})
      : "{}",
  };
  if (!isKnown(envelope)) return { raw, step: undefined };
  const { payload } = envelope;
  if (payload.$case !== "stepCompleted" && payload.$case !== "stepFailed") return { raw, step: undefined };
  const e = payload.value.outcome;
  if (e === undefined) return { raw, step: undefined };
  const failed = payload.$case === "stepFailed" ? payload.value : undefined;
  const completed = payload.$case === "stepCompleted" ? payload.value : undefined;
  const step: StepRow = {
    step_id: e.stepId,
    run_id: envelope.runId,
    step: e.step,
    tag: envelope.tag,
    tenant: envelope.tenant,
    api: apiName(e.api),
    model: e.model,
    stream: e.stream,
    status: failed ? "failed" : "completed",
    failure_reason: failed ? failureReasonName(failed.reason) : "",
    upstream_status: e.upstreamStatus,
    error_type: failed?.errorType ?? "",
    error_code: failed?.errorCode ?? "",
    usage_reported: e.usage?.reported ?? false,
    input_tokens: e.usage?.inputTokens ?? 0,
    output_tokens: e.usage?.outputTokens ?? 0,
    cached_input_tokens: e.usage?.cachedInputTokens ?? 0,
    cache_write_tokens: e.usage?.cacheWriteTokens ?? 0,
    reasoning_tokens: e.usage?.reasoningTokens ?? 0,
    // Counted as the run's fold and the budgets count it; what the log said is kept beside it.
    cost_usd: e.cost?.known ? nanoUsdToDecimal(stepCostNanoUsd(e)) : null,
    cost_problem: costProblem(e),
    estimated: e.estimated || e.unknownPrice,
    usage_estimate: usageEstimateName(e.usageEstimate, e.estimated),
    usage_problem: e.usageProblem,
    unknown_price: e.unknownPrice,
    response_id: e.responseId,
    latency_ms: e.latencyMs,
    first_byte_ms: e.firstByteMs,
    finish_reason: completed?.finishReason ?? "",
    tool_calls: completed?.toolCalls ?? [],
    finished_at: envelope.timestampMs,
    event_id: envelope.id,
    stream_seq: streamSequence,
  };
  return { raw, step };
}

/** Why a step's recorded cost was not counted as it is: only a writer's error (or a forgery) makes one. */
function costProblem(outcome: StepOutcome): string {
  const cost = outcome.cost;
  if (cost?.known !== true || cost.nanoUsd >= 0) return "";
  // Written as ClickHouse writes a Decimal (no trailing zeros), as the migration flagged older rows.
  const usd = nanoUsdToDecimal(cost.nanoUsd).replace(/\.?0+$/, "");
  return `cost ${usd} USD is negative; counted as 0`;
}
