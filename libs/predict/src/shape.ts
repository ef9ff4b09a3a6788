import type { WindowReading } from "./headers.js";

/**
 * How a provider refills one dimension of a key's window, as its readings show it:
 * - `continuous`: what is left grows evenly between readings until the window is whole at
 *   its reset (a token bucket: OpenAI, Anthropic);
 * - `fixed`: what is left stays flat, and the reset stays the same instant, until the whole
 *   window comes back at once (a counter cleared every minute, hour or day);
 * - `sliding`: a sliding log: what a call spent counts for one window after it, so the reset
 *   is always a window after the latest call, however much is left;
 * - `irregular`: none of these fits;
 * - `unknown`: the readings have not told yet.
 *
 * Only `continuous` is acted on as refilling before the reset by itself. A `sliding` window
 * gives back what each call spent a window after it, which only an account of the calls can
 * foretell (the budget service's); for every other shape nothing is counted as back until
 * the reset, which is never early.
 */
export type WindowShape = "continuous" | "fixed" | "sliding" | "irregular" | "unknown";

/** What a dimension's readings showed of its shape, and from how many. */
export interface ShapeView {
  readonly shape: WindowShape;
  /** Readings taken in. */
  readonly readings: number;
  /** Pairs of readings that told one shape from another (the shape is judged from these). */
  readonly evidence: number;
  /**
   * The time between two resets of a window that comes back whole (fixed), or how long a
   * call counts in a sliding log (at most: measured from the call's send, so the window and
   * the quickest a call reached the provider); undefined until seen.
   */
  readonly periodMs: number | undefined;
}

// How late an answer's headers are read after the provider wrote them, at most, besides
// the format's own precision: what a token bucket's foretold refill may be off by.
const READ_LATE_MS = 100;
/** The precision of resets written as whole seconds (Anthropic's, and any not known to be finer). */
export const SECOND_RESOLUTION_MS = 1_000;
// What is left is a whole number (rounded down by the provider); a hundredth of the limit
// covers that and a provider's own rounding.
const UNIT_SHARE = 0.01;
// The shortest period a window is taken to have.
const MIN_PERIOD_MS = 1_000;
// The shape is judged from this many of the latest pairs that told something.
const KEPT = 8;

type Vote = Exclude<WindowShape, "unknown">;

interface Anchor {
  readonly limit: number;
  readonly remaining: number;
  readonly resetAtMs: number;
  readonly readAtMs: number;
  /**
   * When the call it answered was sent (the provider read its window in between); -∞ for a
   * refusal, whose reset is of calls taken before it.
   */
  readonly sentAtMs: number;
}

/**
 * Learns one dimension's shape from its readings, one at a time, in the order they were
 * read. Each reading is held against an earlier one of the same window (the anchor): a
 * token bucket's first reading foretells the second exactly (it refilled at the rate that
 * brings it whole at the reset, less what the reset moved by, which is what calls took); a
 * fixed window's reset has not moved and nothing came back. A pair that fits one and not
 * the other is a vote; one that fits both (too close together to tell) is not, and the
 * anchor stays so that time can tell. A reading past the anchor's reset starts over.
 *
 * The shape is `continuous` only on a clear majority of at least two votes, since acting
 * on it is the optimistic choice; a single vote for `fixed` is enough to be careful.
 */
export class ShapeTracker {
  private anchor: Anchor | undefined;
  private readonly votes: Vote[] = [];
  private taken = 0;
  private period: number | undefined;
  // The shortest a reading's reset was from its call's send, in pairs read as a sliding log:
  // the most a call can count in the log.
  private span: number | undefined;

  /**
   * Takes in one reading of the dimension, read at `readAtMs` from the answer to a call sent
   * at `sentAtMs` (undefined: a refusal, which took nothing), its reset written to the
   * nearest `resolutionMs` (a second when not known to be finer).
   */
  observe(
    read: WindowReading,
    readAtMs: number,
    resolutionMs = SECOND_RESOLUTION_MS,
    sentAtMs: number | undefined = readAtMs,
  ): void {
    this.taken += 1;
    const { limit, resetAtMs, remaining } = read;
    if (limit === undefined || resetAtMs === undefined || limit <= 0) return;
    const next: Anchor = {
      limit,
      remaining,
      resetAtMs,
      readAtMs,
      sentAtMs: sentAtMs === undefined ? Number.NEGATIVE_INFINITY : Math.min(sentAtMs, readAtMs),
    };
    const anchor = this.anchor;
    if (anchor === undefined || anchor.limit !== limit) {
      this.anchor = next;
      return;
    }
    if (readAtMs <= anchor.readAtMs) return;
    // What resets written this finely may be off by (how late the answer was read after the
    // provider wrote it, besides the format's precision).
    const offMs = resolutionMs + READ_LATE_MS;
    if (readAtMs >= anchor.resetAtMs - offMs) {
      // The anchor's window came back whole by now, whatever its shape: a window that came
      // back and did not refill as it went shows its period in how far its reset moved.
      const moved = resetAtMs - anchor.resetAtMs;
      // Less than a second is no period (a late answer's reset, not the next window's).
      if (this.shape !== "continuous" && moved >= Math.max(offMs, MIN_PERIOD_MS)) {
        this.period = this.period === undefined ? moved : Math.min(this.period, moved);
      }
      this.anchor = next;
      return;
    }
    const unit = Math.max(1, limit * UNIT_SHARE);
    const grew = remaining - anchor.remaining;
    const resetMoved = resetAtMs - anchor.resetAtMs;
    // A token bucket's reset moves on by as long as refilling what calls took takes, which a
    // burst of calls soon makes more than `offMs`; a fixed window's stays.
    const fixedFits = Math.abs(resetMoved) <= offMs && grew <= unit;
    // A token bucket refills at the rate that makes it whole at its reset; what calls took
    // since moved the reset on by as long as refilling it takes.
    const rate =
      anchor.remaining < limit && anchor.resetAtMs > anchor.readAtMs
        ? (limit - anchor.remaining) / (anchor.resetAtMs - anchor.readAtMs)
        : undefined;
    if (rate === undefined) {
      this.anchor = next;
      return;
    }
    const foretold = rate * (readAtMs - anchor.readAtMs - resetMoved);
    const continuousFits =
      Math.abs(grew - foretold) <= unit + rate * offMs && sameRate(rate, next, unit, offMs);
    // A sliding log's reset is a window after the call it took last, which it took soon
    // after the reading's own call was sent (however late the answer was read): the reset
    // less the send stays as it was, whatever was spent or came back meanwhile. A bucket's
    // moves by as long as refilling what is missing takes, so a pair tells only when what
    // was missing moved by more than a bucket's reset could hide in `offMs`. A refusal's
    // reset is of calls before it (its send is -∞): it never fits.
    const sinceSentMoved = Math.abs(resetAtMs - next.sentAtMs - (anchor.resetAtMs - anchor.sentAtMs));
    const logTimed = sinceSentMoved <= offMs;
    const slidingFits = logTimed && Math.abs(grew) > unit + 2 * rate * offMs;
    // Too close together to tell: the anchor stays so that time can tell (a fixed window's
    // reset stays, a log's moves as the sends did, and they were less than `offMs` apart).
    // So too, once a log was seen, a pair a bucket and a log both fit (a dimension of few
    // units, requests, fits both often) and one timed as a log whose missing moved too
    // little to tell it from a bucket.
    if (fixedFits && (continuousFits || logTimed)) return;
    if (logTimed && !fixedFits && !slidingFits && this.votes.includes("sliding")) return;
    const vote = fixedFits ? "fixed" : continuousFits ? "continuous" : slidingFits ? "sliding" : "irregular";
    this.vote(vote);
    if (vote === "sliding") {
      this.span = Math.min(
        this.span ?? Number.POSITIVE_INFINITY,
        anchor.resetAtMs - anchor.sentAtMs,
        resetAtMs - next.sentAtMs,
      );
    }
    this.anchor = next;
  }

  get shape(): WindowShape {
    let continuous = 0;
    let fixed = 0;
    let sliding = 0;
    let irregular = 0;
    for (const vote of this.votes) {
      if (vote === "continuous") continuous += 1;
      else if (vote === "fixed") fixed += 1;
      else if (vote === "sliding") sliding += 1;
      else irregular += 1;
    }
    if (continuous >= 2 && continuous > 2 * (fixed + sliding + irregular)) return "continuous";
    if (fixed > 0 && fixed >= sliding + irregular) return "fixed";
    // Acted on as giving back before its reset, so a clear majority as for continuous.
    if (sliding >= 2 && sliding > 2 * (continuous + irregular)) return "sliding";
    if (sliding + irregular > 0) return "irregular";
    return "unknown";
  }

  view(): ShapeView {
    const shape = this.shape;
    return {
      shape,
      readings: this.taken,
      evidence: this.votes.length,
      periodMs: shape === "sliding" ? this.span : this.period,
    };
  }

  private vote(vote: Vote): void {
    this.votes.push(vote);
    if (this.votes.length > KEPT) this.votes.shift();
  }
}

// Rates a tenth apart are the same, besides what rounding can move them by.
const RATE_SHARE = 0.1;

/**
 * A token bucket's readings all show one rate: what is missing over how long it takes to
 * come back. A window that only looks like one for a while (a sliding log, whose reset is a
 * window after its last call however much is missing) shows a rate that follows its use.
 */
function sameRate(rate: number, read: Anchor, unit: number, offMs: number): boolean {
  const missing = read.limit - read.remaining;
  const spanMs = read.resetAtMs - read.readAtMs;
  if (missing <= unit || spanMs <= offMs) return true;
  const slack = RATE_SHARE + unit / missing + offMs / spanMs;
  return Math.abs(missing / spanMs - rate) <= rate * slack;
}

/**
 * The shapes an operator said upstreams' windows have (`predict.window_shapes`, by origin),
 * as a lookup; `auto` and an origin not named are left to be learnt.
 */
export function declaredShapes(
  byOrigin: Readonly<Record<string, "auto" | "continuous" | "fixed">>,
): (upstream: string) => WindowShape | undefined {
  const shapeOf = byOriginLookup(byOrigin, (shape) => (shape === "auto" ? undefined : shape));
  return (upstream) => shapeOf(upstream);
}

/**
 * What an operator configured per upstream (keys written as URLs, matched as the origin a
 * key's upstream is named by), taken in through `take` (undefined: nothing said).
 */
export function byOriginLookup<T, U>(
  byOrigin: Readonly<Record<string, T>>,
  take: (value: T) => U | undefined,
): (upstream: string) => U | undefined {
  const lookup = new Map<string, U>();
  for (const [origin, value] of Object.entries(byOrigin)) {
    const taken = take(value);
    if (taken !== undefined) lookup.set(new URL(origin).origin, taken);
  }
  return (upstream) => lookup.get(upstream);
}
