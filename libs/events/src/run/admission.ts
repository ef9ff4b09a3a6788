import { LimitKind, type Trip } from "@holdfast/proto";
import { type HoldRule, rulesHolding } from "../fleet/rules.js";
import { type RunState, RunStatus, reservedNanoUsd, tokensInLastMinute } from "./state.js";

// The one admission rule: what a run's limits and the fleet's standing rules say of its
// next call. The run's decider applies it to the start it decides (under the run's
// sequence check, the last word); a gateway applies the same functions to the state it
// follows, to know before that word whether a call may be forwarded while its start is
// appended, or must wait for the start to be accepted.

/**
 * Per-run limits as configured for the run's tag (`limits`, `limits_by_tag`); 0 is no
 * limit. A resume's own limits, kept in the run's window, win over these.
 */
export interface ConfiguredLimits {
  readonly maxCostNanoUsd: number;
  readonly maxSteps: number;
  readonly maxMinutes: number;
  readonly maxTokensPerMinute: number;
  /** What a crossed limit does to the run. */
  readonly onTrip: "hold" | "stop";
}

export const NO_LIMITS: ConfiguredLimits = Object.freeze({
  maxCostNanoUsd: 0,
  maxSteps: 0,
  maxMinutes: 0,
  maxTokensPerMinute: 0,
  onTrip: "hold",
});

/** The run's limits for this window: a resume's own, else the configured ones. */
export function windowLimits(configured: ConfiguredLimits, state: RunState): ConfiguredLimits {
  const own = state.window.limits;
  if (own === null) return configured;
  return {
    maxCostNanoUsd: own.maxCostNanoUsd || configured.maxCostNanoUsd,
    maxSteps: own.maxSteps || configured.maxSteps,
    maxMinutes: own.maxMinutes || configured.maxMinutes,
    maxTokensPerMinute: own.maxTokensPerMinute || configured.maxTokensPerMinute,
    onTrip: configured.onTrip,
  };
}

/**
 * The limit this call would find crossed, if any: what the window's finished steps cost
 * (cost), its steps, its minutes, the last minute's tokens.
 */
export function limitCrossed(
  command: { readonly limits: ConfiguredLimits; readonly model: string },
  state: RunState,
  nowMs: number,
): Trip | undefined {
  const limits = windowLimits(command.limits, state);
  const window = state.window;
  const trip = (limit: LimitKind, limitValue: number, spentValue: number): Trip => ({
    limit,
    limitValue,
    spentValue,
    budgetKey: "",
    period: "",
    crossedByStepId: "",
    callModel: command.model,
    prediction: undefined,
  });
  if (limits.maxSteps > 0 && window.steps >= limits.maxSteps) {
    return trip(LimitKind.LIMIT_KIND_STEPS, limits.maxSteps, window.steps);
  }
  if (limits.maxCostNanoUsd > 0 && window.costNanoUsd >= limits.maxCostNanoUsd) {
    return {
      ...trip(LimitKind.LIMIT_KIND_COST, limits.maxCostNanoUsd, window.costNanoUsd),
      crossedByStepId: window.lastFinishedStepId,
    };
  }
  if (limits.maxMinutes > 0) {
    const elapsed = nowMs - window.startedMs;
    if (window.startedMs > 0 && elapsed >= limits.maxMinutes * 60_000) {
      return trip(LimitKind.LIMIT_KIND_MINUTES, limits.maxMinutes * 60_000, elapsed);
    }
  }
  if (limits.maxTokensPerMinute > 0) {
    const tokens = tokensInLastMinute(state, nowMs);
    if (tokens >= limits.maxTokensPerMinute) {
      return trip(LimitKind.LIMIT_KIND_TOKENS_PER_MINUTE, limits.maxTokensPerMinute, tokens);
    }
  }
  return undefined;
}

/** A call about to start, as the run's limits see it. */
export interface NextCall {
  /** The model it asks for (a trip names it). */
  readonly model: string;
  /** What it reserves against the run's cost limit while in flight. */
  readonly reservedNanoUsd: number;
}

/**
 * What a run's limits leave for its next call:
 *
 * - `crossed`: a limit is crossed; the start is a trip instead (`RunTripped`);
 * - `busy`: near its cost limit, the calls in flight, with this one, have reserved more
 *   than is left; the call waits for one of them to finish (`RunBusyError`);
 * - `near`: the call starts, but within one call (per call in flight) of a limit, where a
 *   start decided a moment later (calls in flight finished, others started, the clock on)
 *   may be one of the above: a gateway has its start accepted before forwarding it;
 * - `room`: the call starts, and a start decided a moment later would too.
 */
export type Headroom =
  | { readonly kind: "room" }
  | { readonly kind: "near" }
  | { readonly kind: "busy" }
  | { readonly kind: "crossed"; readonly trip: Trip };

const ROOM: Headroom = Object.freeze({ kind: "room" });
const NEAR: Headroom = Object.freeze({ kind: "near" });
const BUSY: Headroom = Object.freeze({ kind: "busy" });

/** How close to max_minutes a start is near: a minute's limit is met by the decider's clock, later. */
export const NEAR_MINUTES_MS = 30_000;

/**
 * The run's headroom for its next call under these limits (the window's own, where a resume
 * set some), at `nowMs`. Pure. A crossed limit, or a busy run, is what the decider finds
 * at a start; anything but `room` is what a gateway does not forward on a guess.
 */
export function headroom(
  configured: ConfiguredLimits,
  state: RunState,
  call: NextCall,
  nowMs: number,
): Headroom {
  const trip = limitCrossed({ limits: configured, model: call.model }, state, nowMs);
  if (trip !== undefined) return { kind: "crossed", trip };
  const limits = windowLimits(configured, state);
  if (crowdsCostLimit(limits, state, call)) return BUSY;
  return nearLimit(limits, state, nowMs) ? NEAR : ROOM;
}

/**
 * Near its cost limit, a run's calls start one at a time: while calls in flight, with
 * this one, have reserved more than is left, this one waits for them. So a run never trips
 * on what it might spend, only on what it did, and it crosses its limit by at most one
 * call: the last one, started with nothing else in flight.
 */
function crowdsCostLimit(limits: ConfiguredLimits, state: RunState, call: NextCall): boolean {
  if (limits.maxCostNanoUsd <= 0 || state.open.size === 0) return false;
  return state.window.costNanoUsd + reservedNanoUsd(state) + call.reservedNanoUsd > limits.maxCostNanoUsd;
}

/**
 * Within one call (per call in flight, this one counted) of a limit: the calls in flight
 * finishing as the run's calls have on average, and as many starting, or the window's
 * minutes within NEAR_MINUTES_MS of their limit.
 */
function nearLimit(limits: ConfiguredLimits, state: RunState, nowMs: number): boolean {
  const window = state.window;
  const inFlight = state.open.size + 1;
  if (limits.maxSteps > 0 && window.steps + inFlight >= limits.maxSteps) return true;
  if (limits.maxCostNanoUsd > 0) {
    const perCall = state.completed > 0 ? state.totals.costNanoUsd / state.completed : 0;
    const spent = window.costNanoUsd + reservedNanoUsd(state) + perCall * inFlight;
    if (spent >= limits.maxCostNanoUsd) return true;
  }
  // A window that has not opened (the run has no event yet) opens with this call.
  if (
    limits.maxMinutes > 0 &&
    window.startedMs > 0 &&
    nowMs - window.startedMs + NEAR_MINUTES_MS >= limits.maxMinutes * 60_000
  ) {
    return true;
  }
  if (limits.maxTokensPerMinute > 0) {
    const perCall =
      state.completed > 0 ? (state.totals.inputTokens + state.totals.outputTokens) / state.completed : 0;
    if (tokensInLastMinute(state, nowMs) + perCall * inFlight >= limits.maxTokensPerMinute) return true;
  }
  return false;
}

/** What a standing rule sees of a call, beside the run's own fold. */
export interface RuleCall {
  readonly runId: string;
  /** The run's tag as the call names it (the run's own, once it has one, wins). */
  readonly tag: string;
  /** The model the call asks for; "" for a call that is no step (it names none). */
  readonly model: string;
  /** The call's conversation prefix hash; "" for a call that is no step. */
  readonly promptHash: string;
}

/**
 * The first standing rule that holds the run at this call, if one does: its selector
 * matches the run (its id, its tag, or the call's when it has none yet, the call's model
 * and prompt, its activity: "idle" before its first step) and it was added after the run's
 * last resume. `state` undefined is a run with nothing folded yet. Pure.
 */
export function ruleHolding(
  rules: Iterable<HoldRule>,
  state: RunState | undefined,
  call: RuleCall,
): HoldRule | undefined {
  const [rule] = rulesHolding(
    rules,
    {
      runId: call.runId,
      tag: state?.tag || call.tag,
      model: call.model,
      promptHash: call.promptHash,
      status: state === undefined || state.status === RunStatus.New ? "idle" : state.status,
    },
    state?.lastResumedMs ?? null,
  );
  return rule;
}
