import { type Api, RunSource, type StepOutcome, type Usage } from "@holdfast/proto";
import { isKnown, type StoredEnvelope } from "../envelope.js";

/**
 * Where a run is in its life. `running` and `idle` follow its calls (one in flight or
 * none); statuses an operator or a limit sets (held, stopped, by later versions) are
 * kept until an event lifts them, whatever the calls in flight do.
 */
export enum RunStatus {
  New = "new",
  Running = "running",
  Idle = "idle",
}

/** A step whose call is in flight: what deciding its outcome needs. */
export interface OpenStep {
  readonly stepId: string;
  readonly step: number;
  readonly api: Api;
  readonly model: string;
  readonly stream: boolean;
  /** The gateway process that handles the call ("<instance id>#<boot id>"). */
  readonly gateway: string;
  /** Upstream origin the call went to. */
  readonly upstream: string;
  readonly startedMs: number;
  readonly estimatedInputTokens: number;
}

export interface RunTotals {
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly cachedInputTokens: number;
  readonly cacheWriteTokens: number;
  readonly reasoningTokens: number;
  /** Sum over steps whose cost is known. */
  readonly costNanoUsd: number;
  /** Finished steps whose cost is unknown: the run's cost is then a lower bound. */
  readonly unpricedSteps: number;
  /** Finished steps charged from Holdfast's estimate (their outcome was lost). */
  readonly estimatedSteps: number;
}

/**
 * A run as its deciders need it, folded from its events. Each event costs O(1) whatever
 * the run's length (only the calls in flight are kept step by step); the whole history
 * of steps, for people, is `describeRun`.
 */
export interface RunState {
  readonly runId: string;
  readonly status: RunStatus;
  readonly tag: string;
  readonly tenant: string;
  readonly identifiedBy: {
    readonly source: RunSource;
    readonly key: string;
    readonly fingerprint: string;
    readonly generation: number;
  } | null;
  /** The model of the latest step. */
  readonly model: string;
  /** Sequence of the last event folded in; the next event must carry lastSequence + 1. */
  readonly lastSequence: number;
  readonly firstSeenMs: number | null;
  readonly lastSeenMs: number | null;
  /** Steps started so far; the next one is number `started + 1`. */
  readonly started: number;
  readonly completed: number;
  readonly failed: number;
  /** Calls in flight, by step id. */
  readonly open: ReadonlyMap<string, OpenStep>;
  /** Message count of the latest step's request (a shrinking count starts a new loop). */
  readonly lastMessageCount: number;
  readonly totals: RunTotals;
  /** Events of types or versions this code does not know, skipped. */
  readonly unknownEvents: number;
}

const NO_TOTALS: RunTotals = Object.freeze({
  inputTokens: 0,
  outputTokens: 0,
  cachedInputTokens: 0,
  cacheWriteTokens: 0,
  reasoningTokens: 0,
  costNanoUsd: 0,
  unpricedSteps: 0,
  estimatedSteps: 0,
});

const NOTHING_OPEN: ReadonlyMap<string, OpenStep> = new Map();

export function initialState(runId: string): RunState {
  return {
    runId,
    status: RunStatus.New,
    tag: "",
    tenant: "",
    identifiedBy: null,
    model: "",
    lastSequence: 0,
    firstSeenMs: null,
    lastSeenMs: null,
    started: 0,
    completed: 0,
    failed: 0,
    open: NOTHING_OPEN,
    lastMessageCount: 0,
    totals: NO_TOTALS,
    unknownEvents: 0,
  };
}

/**
 * Folds one event into a run. Pure. An event at or below `lastSequence` was already
 * folded (a redelivery) and changes nothing, so folding is idempotent. An event this code
 * does not know still takes its place in the run's sequence.
 */
export function evolve(state: RunState, event: StoredEnvelope): RunState {
  if (event.sequence <= state.lastSequence) return state;
  const seen: RunState = {
    ...state,
    lastSequence: event.sequence,
    firstSeenMs: state.firstSeenMs ?? event.timestampMs,
    lastSeenMs: Math.max(state.lastSeenMs ?? event.timestampMs, event.timestampMs),
    tag: event.tag || state.tag,
    tenant: event.tenant || state.tenant,
  };
  if (!isKnown(event)) return { ...seen, unknownEvents: state.unknownEvents + 1 };
  const { payload } = event;
  switch (payload.$case) {
    case "stepStarted": {
      const e = payload.value;
      const open = new Map(state.open);
      open.set(e.stepId, {
        stepId: e.stepId,
        step: e.step,
        api: e.api,
        model: e.model,
        stream: e.stream,
        gateway: e.gateway,
        upstream: e.upstream,
        startedMs: event.timestampMs,
        estimatedInputTokens: e.estimatedInputTokens,
      });
      const identity = e.identity;
      return withActivity({
        ...seen,
        model: e.model || state.model,
        identifiedBy:
          state.identifiedBy ??
          (identity && identity.source !== RunSource.RUN_SOURCE_UNSPECIFIED
            ? {
                source: identity.source,
                key: identity.key,
                fingerprint: identity.fingerprint,
                generation: identity.generation,
              }
            : null),
        started: Math.max(state.started, e.step),
        open,
        lastMessageCount: e.messageCount,
      });
    }
    case "stepCompleted":
    case "stepFailed": {
      const outcome = payload.value.outcome;
      if (outcome === undefined || !state.open.has(outcome.stepId)) return withActivity(seen);
      const open = new Map(state.open);
      open.delete(outcome.stepId);
      const completed = payload.$case === "stepCompleted";
      return withActivity({
        ...seen,
        model: outcome.model || seen.model,
        open,
        completed: state.completed + (completed ? 1 : 0),
        failed: state.failed + (completed ? 0 : 1),
        totals: addOutcome(state.totals, outcome),
      });
    }
  }
}

function addOutcome(t: RunTotals, outcome: StepOutcome): RunTotals {
  const usage: Usage | undefined = outcome.usage;
  const known = outcome.cost?.known === true;
  return {
    inputTokens: t.inputTokens + (usage?.inputTokens ?? 0),
    outputTokens: t.outputTokens + (usage?.outputTokens ?? 0),
    cachedInputTokens: t.cachedInputTokens + (usage?.cachedInputTokens ?? 0),
    cacheWriteTokens: t.cacheWriteTokens + (usage?.cacheWriteTokens ?? 0),
    reasoningTokens: t.reasoningTokens + (usage?.reasoningTokens ?? 0),
    costNanoUsd: t.costNanoUsd + (known ? (outcome.cost?.nanoUsd ?? 0) : 0),
    unpricedSteps: t.unpricedSteps + (known ? 0 : 1),
    estimatedSteps: t.estimatedSteps + (outcome.estimated ? 1 : 0),
  };
}

/** `running` while a call is in flight, `idle` when none is; other statuses stay. */
function withActivity(state: RunState): RunState {
  const activity = state.open.size > 0 ? RunStatus.Running : RunStatus.Idle;
  switch (state.status) {
    case RunStatus.New:
    case RunStatus.Running:
    case RunStatus.Idle:
      return state.status === activity ? state : { ...state, status: activity };
  }
}

/** Folds a run's events in order. */
export function foldRun(runId: string, events: Iterable<StoredEnvelope>): RunState {
  let state = initialState(runId);
  for (const event of events) state = evolve(state, event);
  return state;
}
