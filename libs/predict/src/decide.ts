import type { Dimension } from "./headers.js";
import { DIMENSIONS, type KeyWindow, type Need } from "./keys.js";

/** The figures a decision was made with, for its event and for `holdfast show`. */
export interface Figures {
  /** The dimension that decided (the one that makes the call wait longest); undefined when none constrained it. */
  readonly dimension: Dimension | undefined;
  readonly limit: number;
  /** Left in that dimension now, refill included, less what calls in flight reserved. */
  readonly remaining: number;
  /** What the call needs of it: the estimate plus the margin k·σ (1 for requests). */
  readonly needed: number;
  /** When that dimension is whole again (ms since the epoch; 0 when unsaid). */
  readonly resetAtMs: number;
}

export type Decision =
  | { readonly action: "continue"; readonly figures: Figures }
  /** Park the call until `untilMs`, then decide again. */
  | { readonly action: "wait"; readonly untilMs: number; readonly figures: Figures }
  /** A wait longer than the threshold (or past the deadline): hold the run until `untilMs`. */
  | {
      readonly action: "checkpoint";
      readonly untilMs: number;
      readonly why: "threshold" | "deadline";
      readonly figures: Figures;
    }
  /** The call needs more than the whole window holds: no wait can help. */
  | { readonly action: "too_large"; readonly figures: Figures };

export interface DecideInput {
  /** The key's window; undefined when nothing is known of it yet (the call goes on). */
  readonly window: KeyWindow | undefined;
  readonly need: Need;
  /**
   * What the call takes for certain (its input and its output cap, or its estimate without
   * the margin): a call is too large only when this is more than the whole window; a margin
   * that is, is cut to the window. Default `need`.
   */
  readonly floor?: Need;
  readonly nowMs: number;
  /** Waits up to this long are waited in place; longer ones checkpoint the run. */
  readonly waitThresholdMs: number;
  /** The run must not wait past this (ms since the epoch); undefined for none. */
  readonly deadlineMs?: number;
}

const NO_FIGURES: Figures = Object.freeze({
  dimension: undefined,
  limit: 0,
  remaining: 0,
  needed: 0,
  resetAtMs: 0,
});

// A window's refill is an estimate from its last reading: a wait ends a little after the
// figure says, rather than a little before it and into a 429.
const SETTLE_MS = 50;

/**
 * Continue, wait or checkpoint, from a key's window and what the call needs: the call goes
 * on when every dimension the provider reports has room for it (after what calls in flight
 * reserved); otherwise it waits until the slowest dimension has refilled enough, in place
 * when that is within the threshold (and the deadline), as a checkpoint of the run when not.
 * Exhausted requests block the call however many tokens are left; a cooldown a 429 asked
 * for blocks it until it ends.
 */
export function decide(input: DecideInput): Decision {
  const { window, need, nowMs } = input;
  if (window === undefined) return { action: "continue", figures: NO_FIGURES };
  let untilMs = window.coolingUntil(nowMs);
  let figures = NO_FIGURES;
  for (const dimension of DIMENSIONS) {
    const view = window.view(dimension, nowMs);
    if (view === undefined || need[dimension] <= 0) continue;
    const floor = input.floor?.[dimension] ?? need[dimension];
    const amount =
      view.limit === undefined ? need[dimension] : Math.min(need[dimension], Math.max(floor, view.limit));
    const here: Figures = {
      dimension,
      limit: view.limit ?? 0,
      remaining: Math.max(0, Math.floor(view.remaining - view.reserved)),
      needed: Math.ceil(amount),
      resetAtMs: view.resetAtMs ?? 0,
    };
    if (view.limit !== undefined && floor > view.limit)
      return { action: "too_large", figures: { ...here, needed: Math.ceil(floor) } };
    if (view.remaining - view.reserved >= amount) {
      // The figures of a call that goes on are those of the dimension with the least room to spare.
      if (untilMs === 0 && (figures.dimension === undefined || slack(here) < slack(figures))) figures = here;
      continue;
    }
    // What calls in flight reserved is theirs until they answer. They were sent after the
    // reading, so they take it out of the window as it refills: with the call, more than the
    // whole window is room only once their part has refilled too (not at the reading's
    // reset, which may have passed).
    const at =
      window.availableAt(dimension, amount + view.reserved, nowMs) ??
      window.refilledAt(dimension, amount + view.reserved, nowMs, DEFAULT_REFILL_MS) ??
      view.resetAtMs ??
      nowMs + DEFAULT_REFILL_MS;
    if (at + SETTLE_MS > untilMs) {
      untilMs = at + SETTLE_MS;
      figures = here;
    }
  }
  if (untilMs <= nowMs) return { action: "continue", figures };
  if (input.deadlineMs !== undefined && untilMs > input.deadlineMs) {
    return { action: "checkpoint", untilMs, why: "deadline", figures };
  }
  if (untilMs - nowMs > input.waitThresholdMs)
    return { action: "checkpoint", untilMs, why: "threshold", figures };
  return { action: "wait", untilMs, figures };
}

/** A dimension's room to spare after the call, as a share of its limit. */
function slack(figures: Figures): number {
  return (figures.remaining - figures.needed) / Math.max(1, figures.limit);
}

// A dimension with no reset said refills in a minute, as per-minute limits do.
const DEFAULT_REFILL_MS = 60_000;
