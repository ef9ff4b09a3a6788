import { isKnown, type StoredEnvelope } from "../envelope.js";
import { apiName, failureReasonName, runSourceName } from "../names.js";
import { evolve, initialState, type RunState, type RunTotals } from "./state.js";

export type StepStatus = "in_flight" | "completed" | "failed";

/** One step as people see it (`holdfast show`): names, not enum numbers. */
export interface StepView {
  stepId: string;
  step: number;
  status: StepStatus;
  api: string;
  /** Requested model, replaced by the model the provider says answered once known. */
  model: string;
  stream: boolean;
  messageCount: number;
  /** The gateway process that handled the call (instance id and boot id). */
  gateway: string;
  startedMs: number;
  finishedMs: number | null;
  upstreamStatus: number | null;
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  cacheWriteTokens: number;
  reasoningTokens: number;
  usageReported: boolean;
  /** Null while unknown (unpriced model, no usage reported, or still in flight). */
  costNanoUsd: number | null;
  /** Usage and cost are Holdfast's estimate: the outcome was lost with its gateway. */
  estimated: boolean;
  latencyMs: number | null;
  firstByteMs: number | null;
  responseId: string;
  finishReason: string;
  toolCalls: string[];
  failure: { reason: string; errorType: string; errorCode: string; message: string } | null;
}

/** A run as people see it: its state and every step, in order. */
export interface RunView {
  runId: string;
  status: string;
  tag: string;
  tenant: string;
  identifiedBy: { source: string; key: string; fingerprint: string; generation: number } | null;
  model: string;
  lastSequence: number;
  firstSeenMs: number | null;
  lastSeenMs: number | null;
  steps: StepView[];
  inFlight: number;
  completed: number;
  failed: number;
  totals: RunTotals;
  unknownEvents: number;
}

/**
 * The whole history of a run, for display. Built in one pass over its events (the steps
 * are accumulated in place, so a long run costs O(n), not O(n²)); deciders use the
 * O(1)-per-event RunState instead.
 */
export function describeRun(runId: string, events: Iterable<StoredEnvelope>): RunView {
  let state: RunState = initialState(runId);
  const steps: StepView[] = [];
  const byId = new Map<string, StepView>();
  for (const event of events) {
    const before = state.lastSequence;
    state = evolve(state, event);
    if (state.lastSequence === before || !isKnown(event)) continue;
    const { payload } = event;
    if (payload.$case === "stepStarted") {
      const e = payload.value;
      const step: StepView = {
        stepId: e.stepId,
        step: e.step,
        status: "in_flight",
        api: apiName(e.api),
        model: e.model,
        stream: e.stream,
        messageCount: e.messageCount,
        gateway: e.gateway,
        startedMs: event.timestampMs,
        finishedMs: null,
        upstreamStatus: null,
        inputTokens: 0,
        outputTokens: 0,
        cachedInputTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
        usageReported: false,
        costNanoUsd: null,
        estimated: false,
        latencyMs: null,
        firstByteMs: null,
        responseId: "",
        finishReason: "",
        toolCalls: [],
        failure: null,
      };
      steps.push(step);
      byId.set(e.stepId, step);
      continue;
    }
    const outcome = payload.value.outcome;
    const step = outcome === undefined ? undefined : byId.get(outcome.stepId);
    if (outcome === undefined || step === undefined || step.status !== "in_flight") continue;
    const usage = outcome.usage;
    step.status = payload.$case === "stepCompleted" ? "completed" : "failed";
    step.model = outcome.model || step.model;
    step.finishedMs = event.timestampMs;
    step.upstreamStatus = outcome.upstreamStatus === 0 ? null : outcome.upstreamStatus;
    step.inputTokens = usage?.inputTokens ?? 0;
    step.outputTokens = usage?.outputTokens ?? 0;
    step.cachedInputTokens = usage?.cachedInputTokens ?? 0;
    step.cacheWriteTokens = usage?.cacheWriteTokens ?? 0;
    step.reasoningTokens = usage?.reasoningTokens ?? 0;
    step.usageReported = usage?.reported ?? false;
    step.costNanoUsd = outcome.cost?.known ? outcome.cost.nanoUsd : null;
    step.estimated = outcome.estimated;
    step.latencyMs = outcome.latencyMs;
    step.firstByteMs = outcome.firstByteMs;
    step.responseId = outcome.responseId;
    if (payload.$case === "stepCompleted") {
      step.finishReason = payload.value.finishReason;
      step.toolCalls = [...payload.value.toolCalls];
    } else {
      const f = payload.value;
      step.failure = {
        reason: failureReasonName(f.reason),
        errorType: f.errorType,
        errorCode: f.errorCode,
        message: f.errorMessage,
      };
    }
  }
  const id = state.identifiedBy;
  return {
    runId,
    status: state.status,
    tag: state.tag,
    tenant: state.tenant,
    identifiedBy: id === null ? null : { ...id, source: runSourceName(id.source) },
    model: state.model,
    lastSequence: state.lastSequence,
    firstSeenMs: state.firstSeenMs,
    lastSeenMs: state.lastSeenMs,
    steps,
    inFlight: state.open.size,
    completed: state.completed,
    failed: state.failed,
    totals: state.totals,
    unknownEvents: state.unknownEvents,
  };
}
