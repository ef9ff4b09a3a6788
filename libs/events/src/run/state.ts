import { RunSource } from "@holdfast/proto";
import type { DecodedEnvelope } from "../envelope.js";
import { apiName, failureReasonName, runSourceName } from "../names.js";

export type StepStatus = "in_flight" | "completed" | "failed";

export interface StepState {
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
  usageReported: boolean;
  /** Null while unknown (unpriced model, no usage reported, or still in flight). */
  costNanoUsd: number | null;
  latencyMs: number | null;
  firstByteMs: number | null;
  finishReason: string;
  toolCalls: string[];
  failure: { reason: string; errorType: string; errorCode: string; message: string } | null;
}

/**
 * A run as folded from its events. `running` means a model call is in flight; `idle`
 * means none is (the agent is between calls, or finished).
 */
export interface RunState {
  runId: string;
  status: "new" | "running" | "idle";
  tag: string;
  identifiedBy: { source: string; key: string; fingerprint: string; generation: number } | null;
  /** The model of the latest step. */
  model: string;
  /** Sequence of the last event folded in; the next event must carry lastSequence + 1. */
  lastSequence: number;
  firstSeenMs: number | null;
  lastSeenMs: number | null;
  steps: StepState[];
  inFlight: number;
  completed: number;
  failed: number;
  totals: {
    inputTokens: number;
    outputTokens: number;
    cachedInputTokens: number;
    /** Sum over steps whose cost is known. */
    costNanoUsd: number;
    /** Finished steps whose cost is unknown: the run's cost is then a lower bound. */
    unpricedSteps: number;
  };
}

export function initialState(runId: string): RunState {
  return {
    runId,
    status: "new",
    tag: "",
    identifiedBy: null,
    model: "",
    lastSequence: 0,
    firstSeenMs: null,
    lastSeenMs: null,
    steps: [],
    inFlight: 0,
    completed: 0,
    failed: 0,
    totals: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, costNanoUsd: 0, unpricedSteps: 0 },
  };
}

/**
 * Folds one event into a run. Pure. An event at or below `lastSequence` was already
 * folded (a redelivery) and changes nothing, so folding is idempotent.
 */
export function evolve(state: RunState, event: DecodedEnvelope): RunState {
  if (event.sequence <= state.lastSequence) return state;
  const next: RunState = {
    ...state,
    lastSequence: event.sequence,
    firstSeenMs: state.firstSeenMs ?? event.timestampMs,
    lastSeenMs: Math.max(state.lastSeenMs ?? event.timestampMs, event.timestampMs),
    tag: event.tag || state.tag,
  };
  const { payload } = event;
  switch (payload.$case) {
    case "stepStarted": {
      const e = payload.value;
      const step: StepState = {
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
        usageReported: false,
        costNanoUsd: null,
        latencyMs: null,
        firstByteMs: null,
        finishReason: "",
        toolCalls: [],
        failure: null,
      };
      const identity = e.identity;
      return withStatus({
        ...next,
        model: e.model || state.model,
        identifiedBy:
          state.identifiedBy ??
          (identity && identity.source !== RunSource.RUN_SOURCE_UNSPECIFIED
            ? {
                source: runSourceName(identity.source),
                key: identity.key,
                fingerprint: identity.fingerprint,
                generation: identity.generation,
              }
            : null),
        steps: [...state.steps, step],
        inFlight: state.inFlight + 1,
      });
    }
    case "stepCompleted":
    case "stepFailed": {
      const e = payload.value;
      const index = state.steps.findIndex((s) => s.stepId === e.stepId);
      const started = index >= 0 ? state.steps[index] : undefined;
      if (started === undefined || started.status !== "in_flight") return withStatus(next);
      const usage = e.usage;
      const cost = e.cost;
      const finished: StepState = {
        ...started,
        status: payload.$case === "stepCompleted" ? "completed" : "failed",
        model: e.model || started.model,
        finishedMs: event.timestampMs,
        upstreamStatus: e.upstreamStatus === 0 ? null : e.upstreamStatus,
        inputTokens: usage?.inputTokens ?? 0,
        outputTokens: usage?.outputTokens ?? 0,
        cachedInputTokens: usage?.cachedInputTokens ?? 0,
        usageReported: usage?.reported ?? false,
        costNanoUsd: cost?.known ? cost.nanoUsd : null,
        latencyMs: e.latencyMs,
        firstByteMs: e.firstByteMs,
        finishReason: payload.$case === "stepCompleted" ? payload.value.finishReason : "",
        toolCalls: payload.$case === "stepCompleted" ? payload.value.toolCalls : [],
        failure:
          payload.$case === "stepFailed"
            ? {
                reason: failureReasonName(payload.value.reason),
                errorType: payload.value.errorType,
                errorCode: payload.value.errorCode,
                message: payload.value.errorMessage,
              }
            : null,
      };
      const steps = state.steps.slice();
      steps[index] = finished;
      const t = state.totals;
      return withStatus({
        ...next,
        model: finished.model || next.model,
        steps,
        inFlight: state.inFlight - 1,
        completed: state.completed + (finished.status === "completed" ? 1 : 0),
        failed: state.failed + (finished.status === "failed" ? 1 : 0),
        totals: {
          inputTokens: t.inputTokens + finished.inputTokens,
          outputTokens: t.outputTokens + finished.outputTokens,
          cachedInputTokens: t.cachedInputTokens + finished.cachedInputTokens,
          costNanoUsd: t.costNanoUsd + (finished.costNanoUsd ?? 0),
          unpricedSteps: t.unpricedSteps + (finished.costNanoUsd === null ? 1 : 0),
        },
      });
    }
  }
}

function withStatus(state: RunState): RunState {
  return { ...state, status: state.inFlight > 0 ? "running" : "idle" };
}

/** Folds a run's events in order. */
export function foldRun(runId: string, events: Iterable<DecodedEnvelope>): RunState {
  let state = initialState(runId);
  for (const event of events) state = evolve(state, event);
  return state;
}
