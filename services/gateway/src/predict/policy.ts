import type { ConfiguredLimits, RunState } from "@holdfast/events";
import { windowLimits } from "@holdfast/events";
import type { Decision, Figures, KeyWindow, Need, RateLimitReading } from "@holdfast/predict";
import { type GatewayError, InvalidRequestError } from "../errors.js";
import type { Room } from "../routing/router.js";

// Each policy here is a pure function of the clock's reading (`nowMs`) and what is known of
// a key's window (its readings, or the decision `decide` made of them): no timers, no I/O.
// The feature (feature.ts) reads the state, asks these, and applies what they say.

/** How long a call may wait for its key's window, from when it first came to prediction. */
export interface Ceiling {
  /** When the call first came to prediction (ms since the epoch). */
  readonly sinceMs: number;
  /** predict.max_wait_s, in ms. */
  readonly maxWaitMs: number;
}

/** Whether a wait until `untilMs` ends past the call's ceiling. */
export function pastCeiling(untilMs: number, ceiling: Ceiling): boolean {
  return untilMs - ceiling.sinceMs > ceiling.maxWaitMs;
}

/** How long from now until the call's ceiling (never negative): its give-up timer. */
export function ceilingLeftMs(nowMs: number, ceiling: Ceiling): number {
  return Math.max(0, ceiling.sinceMs + ceiling.maxWaitMs - nowMs);
}

/** What a call does next, from its key window's decision. */
export type Step =
  /** Goes on (its reservation taken out of the window). */
  | { readonly kind: "go" }
  /** Refused: more than the whole window holds. */
  | { readonly kind: "too_large" }
  /** Refused with a 429 that says to retry after this long: the wait is past its ceiling. */
  | { readonly kind: "give_up"; readonly retryAfterMs: number }
  /** Waits in place this long (until `untilMs`), then is decided again. */
  | { readonly kind: "wait"; readonly waitMs: number; readonly untilMs: number; readonly figures: Figures }
  /** Its run is checkpointed until the decision's `untilMs`. */
  | { readonly kind: "checkpoint"; readonly decision: CheckpointDecision };

export type CheckpointDecision = Extract<Decision, { action: "checkpoint" }>;

/**
 * When to wait and how long: a wait within the call's ceiling is waited in place; one past
 * it is given up at once (with how long the window needs as its retry-after). A checkpoint
 * the gateway would resume itself (`auto_resume`) past the ceiling is given up the same way;
 * one an operator resumes (`hold`) is taken whatever its length.
 */
export function nextStep(
  decision: Decision,
  nowMs: number,
  ceiling: Ceiling,
  onCheckpoint: "auto_resume" | "hold",
): Step {
  switch (decision.action) {
    case "continue":
      return { kind: "go" };
    case "too_large":
      return { kind: "too_large" };
    case "wait":
      if (pastCeiling(decision.untilMs, ceiling))
        return { kind: "give_up", retryAfterMs: decision.untilMs - nowMs };
      return {
        kind: "wait",
        waitMs: decision.untilMs - nowMs,
        untilMs: decision.untilMs,
        figures: decision.figures,
      };
    case "checkpoint":
      return checkpointStep(decision, nowMs, ceiling, onCheckpoint);
  }
}

/** A checkpoint decided (by the local window, or the fleet's coordinator): taken, or given up. */
export function checkpointStep(
  decision: CheckpointDecision,
  nowMs: number,
  ceiling: Ceiling,
  onCheckpoint: "auto_resume" | "hold",
): Extract<Step, { kind: "checkpoint" | "give_up" }> {
  if (pastCeiling(decision.untilMs, ceiling) && onCheckpoint === "auto_resume") {
    return { kind: "give_up", retryAfterMs: decision.untilMs - nowMs };
  }
  return { kind: "checkpoint", decision };
}

/** Who is out to take the first reading of a key: nobody, this call, or another one. */
export type Prober = "none" | "this" | "other";

/**
 * A key nothing is read of yet lets one call go (it claims the probe) and keeps the others
 * until that call's answer says what the window is, so a fleet starting at once does not go
 * on a guess. A key that said it reports nothing (`silent`), or a call that has already
 * waited for a reading once (`probed`), is decided as it is.
 */
export function probeStep(key: {
  readonly known: boolean;
  readonly silent: boolean;
  readonly prober: Prober;
  readonly callsInFlight: number;
  readonly probed: boolean;
}): "claim" | "wait_for_reading" | "decide" {
  if (key.probed || key.known || key.silent) return "decide";
  if (key.prober === "none" && key.callsInFlight === 0) return "claim";
  if (key.prober === "other" || (key.prober === "none" && key.callsInFlight > 0)) return "wait_for_reading";
  return "decide";
}

// A key this gateway has read and the coordinator not yet: asked again this often, for at
// most this long from the call's arrival, before this gateway decides alone.
export const COORDINATOR_CATCH_UP_MS = 20;
export const UNKNOWN_TO_COORDINATOR_MS = 2_000;

/**
 * How long to wait before asking the fleet's coordinator again, when it knows nothing of a
 * key this gateway has read (the reading is on its way there: deciding here meanwhile would
 * spend the window another gateway spends too); undefined when the call should not wait
 * for it (the coordinator knows the key, this gateway does not either, or the call has
 * waited for the coordinator long enough).
 */
export function coordinatorCatchUpMs(
  coordinatorKnows: boolean,
  knownHere: boolean,
  nowMs: number,
  sinceMs: number,
): number | undefined {
  if (coordinatorKnows || !knownHere || nowMs - sinceMs >= UNKNOWN_TO_COORDINATOR_MS) return undefined;
  return COORDINATOR_CATCH_UP_MS;
}

/**
 * A call queued at the fleet's coordinator waits its turn in place for what is left of its
 * ceiling; a turn expected later than that is given up at once.
 */
export function turnStep(
  etaMs: number,
  nowMs: number,
  ceiling: Ceiling,
):
  | { readonly kind: "give_up"; readonly retryAfterMs: number }
  | { readonly kind: "wait"; readonly leftMs: number } {
  const leftMs = ceiling.sinceMs + ceiling.maxWaitMs - nowMs;
  if (etaMs - nowMs > leftMs) return { kind: "give_up", retryAfterMs: etaMs - nowMs };
  return { kind: "wait", leftMs };
}

// Retries after a 429 that named no wait back off from this.
export const BACKOFF_MS = 1_000;

/**
 * How long to wait before sending again a call the provider refused with a 429: what the
 * provider asked (retry-after), or what the key's window says, whichever is longer (or
 * what the provider asked alone, when `askedFirst`); with neither, an exponential backoff
 * from 1 s. Undefined (no retry) when the call is larger than the whole window or the wait
 * ends past its ceiling.
 */
export function retryWaitMs(input: {
  readonly decision: Decision;
  /** The refusal's retry-after, when it had one. */
  readonly askedMs: number | undefined;
  /**
   * The window's figure is only a bound (its shape is not known to refill as it goes: it
   * says the reset): the provider's retry-after, when it gave one, is taken instead.
   */
  readonly askedFirst?: boolean;
  /** 1 for the first retry. */
  readonly attempt: number;
  readonly nowMs: number;
  readonly ceiling: Ceiling;
}): number | undefined {
  const { decision, askedMs, attempt, nowMs, ceiling } = input;
  const window =
    (input.askedFirst === true && askedMs !== undefined && askedMs > 0) ||
    (decision.action !== "wait" && decision.action !== "checkpoint")
      ? 0
      : decision.untilMs - nowMs;
  const waitMs = Math.max(
    askedMs ?? 0,
    window,
    askedMs === undefined && window === 0 ? BACKOFF_MS * 2 ** (attempt - 1) : 0,
  );
  if (decision.action === "too_large" || nowMs + waitMs - ceiling.sinceMs > ceiling.maxWaitMs)
    return undefined;
  return waitMs;
}

/**
 * How much room a route target's key window has for a call, from the decision made for it
 * there (with no wait threshold): what routing chooses a target by. A key nothing is read
 * of is taken as whole (`unknown`).
 */
export function roomFrom(decision: Decision | undefined, nowMs: number): Room {
  if (decision === undefined) return { kind: "unknown" };
  switch (decision.action) {
    case "continue": {
      const { dimension, remaining, needed, limit } = decision.figures;
      if (dimension === undefined) return { kind: "ready", headroom: 1 };
      return { kind: "ready", headroom: Math.max(0, (remaining - needed) / Math.max(1, limit)) };
    }
    case "too_large":
      return { kind: "too_large" };
    default:
      return { kind: "wait", waitMs: decision.untilMs - nowMs };
  }
}

// A call whose window would keep less than this share of what it needs to spare is
// counted again with the model's own tokenizer before it is let through on a guess.
const CLOSE_SHARE = 1;

/**
 * Whether a call is close enough to its window's end to be counted exactly (with the
 * model's tokenizer) before it is let through: any call that would not simply go on, and
 * one that would but leaves less than it needs again in a token dimension.
 */
export function countExactly(decision: Decision): boolean {
  if (decision.action !== "continue") return decision.action !== "too_large";
  const { dimension, remaining, needed } = decision.figures;
  return dimension !== undefined && dimension !== "requests" && remaining - needed < needed * CLOSE_SHARE;
}

/**
 * The largest input a compaction's summary call may send: half the key window's smallest
 * token limit it reports (tokens or input tokens), so a summary never takes the window
 * whole; unbounded when the window reports none.
 */
export function summaryMaxInputTokens(window: KeyWindow, nowMs: number): number {
  const limits = (["tokens", "inputTokens"] as const)
    .map((d) => window.view(d, nowMs)?.limit)
    .filter((l): l is number => l !== undefined && l > 0);
  return limits.length === 0 ? Number.POSITIVE_INFINITY : Math.floor(Math.min(...limits) / 2);
}

/** What a summary call of this many tokens takes of its key's window. */
export function summaryNeed(tokens: number): Need {
  return { requests: 1, tokens, inputTokens: tokens, outputTokens: 0 };
}

/**
 * A summary call goes when its window has room (decided with no wait threshold), waits in
 * place within the ceiling of the call it compacts, and is not sent at all when it is larger
 * than the whole window or would wait past that ceiling.
 */
export function summaryStep(
  decision: Decision,
  nowMs: number,
  ceiling: Ceiling,
): { readonly kind: "go" } | { readonly kind: "skip" } | { readonly kind: "wait"; readonly waitMs: number } {
  if (decision.action === "continue") return { kind: "go" };
  if (decision.action === "too_large" || pastCeiling(decision.untilMs, ceiling)) return { kind: "skip" };
  return { kind: "wait", waitMs: decision.untilMs - nowMs };
}

/**
 * A reading as an answer of this status can give it: a retry-after asks to wait only on a
 * refusal (429, 503). On an answer the provider served it is no reading: believed, one 200
 * carrying `retry-after: 86400` kept every call of its key waiting for a day, across
 * restarts (the reading is recorded), with no call left to correct it.
 */
export function refusalOnly(
  reading: RateLimitReading | undefined,
  status: number,
): RateLimitReading | undefined {
  if (reading?.retryAfterMs === undefined || status === 429 || status === 503) return reading;
  const { retryAfterMs: _unasked, ...rest } = reading;
  return Object.keys(rest).length > 0 ? rest : undefined;
}

/** The run's deadline: the end of its max_minutes window, when it has one. */
export function deadlineOf(
  state: RunState | undefined,
  tag: string,
  limitsFor: (tag: string) => ConfiguredLimits,
): number | undefined {
  if (state === undefined) return undefined;
  const limits = windowLimits(limitsFor(state.tag || tag), state);
  if (limits.maxMinutes <= 0 || state.window.startedMs <= 0) return undefined;
  return state.window.startedMs + limits.maxMinutes * 60_000;
}

// An integer priority, higher first: the header's, else the run's tag's.
const PRIORITY = /^[+-]?\d{1,4}$/;

/** A call's priority at the fleet's coordinator: its X-Holdfast-Priority header, else its run's tag's, else 0. */
export function priorityOf(
  header: string | string[] | undefined,
  tag: string,
  byTag: Readonly<Record<string, number>>,
): number | GatewayError {
  if (header === undefined) return byTag[tag] ?? 0;
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined || !PRIORITY.test(value.trim()) || Math.abs(Number(value)) > 1_000) {
    return new InvalidRequestError(
      `X-Holdfast-Priority must be an integer from -1000 to 1000 (higher is served first), not ${JSON.stringify(String(header)).slice(0, 80)}.`,
      { param: "X-Holdfast-Priority" },
    );
  }
  return Number(value);
}
