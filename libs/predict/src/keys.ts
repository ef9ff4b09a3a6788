import type { Dimension, RateLimitReading, WindowReading } from "./headers.js";
import { SECOND_RESOLUTION_MS, ShapeTracker, type ShapeView, type WindowShape } from "./shape.js";
import { WindowState } from "./window.js";

export const DIMENSIONS: readonly Dimension[] = ["requests", "tokens", "inputTokens", "outputTokens"];

/** What a call takes from its key's window, per dimension (a request, and tokens). */
export type Need = Readonly<Record<Dimension, number>>;

interface InFlight {
  readonly startedAtMs: number;
  readonly need: Need;
}

/** What a window of one dimension is now: its limit, what is left, when it is whole again. */
export interface DimensionView {
  readonly limit: number | undefined;
  /** Left now, refill included, before what calls in flight reserved. */
  readonly remaining: number;
  /** What calls this process forwarded since the reading have reserved and the reading does not show. */
  readonly reserved: number;
  readonly resetAtMs: number | undefined;
  /** How the window was read to refill: only a `continuous` one is counted as refilling before its reset. */
  readonly shape: WindowShape;
}

// A reading is worth recording when a dimension moved by this share of its limit since
// the last one recorded, or when the last one recorded is this old and anything moved;
// and every reading that moved while a dimension has less than TIGHT_SHARE of its limit
// left (other gateways on the key then need every one).
const RECORD_SHARE = 0.1;
const RECORD_EVERY_MS = 10_000;
const TIGHT_SHARE = 0.2;
// The shortest reset that is taken for a window's end when a reading is recorded.
const MIN_WINDOW_MS = 1_000;

/**
 * One provider key's window as this process knows it: the last reading of each
 * dimension, refilled as time passes; a cooldown a 429's `retry-after` asked for; and
 * what the calls forwarded since that reading (whose cost it cannot show yet) reserved.
 *
 * A reading answers a call; it counts every call the provider admitted before that one.
 * Calls started after it are not in it, so their reservations are subtracted until their
 * own answers come back.
 */
export class KeyWindow {
  private readonly dimensions = new Map<Dimension, WindowState>();
  private readonly shapes = new Map<Dimension, ShapeTracker>();
  // The shapes other gateways' readings of the key said they had learnt.
  private readonly told = new Map<Dimension, WindowShape>();
  private readonly inFlight = new Map<object, InFlight>();
  private asOfMs = Number.NEGATIVE_INFINITY;
  private cooldownUntilMs = 0;
  private unread = 0;
  private recorded:
    | { atMs: number; remaining: Map<Dimension, number>; resetAtMs: Map<Dimension, number> }
    | undefined;

  constructor(
    /** Hash of the upstream origin and the key: never the key itself. */
    readonly keyId: string,
    /** The upstream's origin (scheme://host:port). */
    readonly upstream: string,
    /** The shape an operator said the upstream's windows have, taken over what readings show. */
    private readonly declared?: WindowShape,
  ) {}

  /**
   * Takes in a reading from the answer to a call started at `asOfMs`, read at `nowMs`.
   * True when it is worth recording as an event: the first, a move by a tenth of a
   * limit, a cooldown, a change of a dimension's shape, the first past the last recorded
   * one's reset (unless read as refilling evenly), or any move ten seconds after the last
   * recorded one. `resolutionMs`: how finely the provider writes its resets (1 for
   * OpenAI's durations, 1,000 for Anthropic's whole-second timestamps).
   */
  observe(
    reading: RateLimitReading,
    asOfMs: number,
    nowMs: number,
    resolutionMs: number = SECOND_RESOLUTION_MS,
  ): boolean {
    if (reading.retryAfterMs !== undefined) this.coolDown(nowMs + reading.retryAfterMs);
    // An answer to an older call than the last reading's says less than it does.
    if (asOfMs < this.asOfMs) return reading.retryAfterMs !== undefined;
    let moved = false;
    const refused = reading.retryAfterMs !== undefined;
    for (const dimension of DIMENSIONS) {
      const read = reading[dimension];
      if (read === undefined) continue;
      const shapeBefore = this.shapes.get(dimension)?.shape;
      this.take(dimension, read, nowMs, resolutionMs, refused ? undefined : asOfMs);
      // Other gateways, and `holdfast windows`, learn a new shape from the reading that showed it.
      if (this.shapes.get(dimension)?.shape !== shapeBefore) moved = true;
      const before = this.recorded?.remaining.get(dimension);
      const recordedReset = this.recorded?.resetAtMs.get(dimension) ?? 0;
      const limit = read.limit ?? read.remaining;
      if (before === undefined || Math.abs(before - read.remaining) >= Math.max(1, limit * RECORD_SHARE)) {
        moved = true;
      } else if (recordedReset > 0 && nowMs > recordedReset && this.shapeNow(dimension) !== "continuous") {
        // The window recorded is over: what the shared account knows of the key ends at its
        // reset, and only a key refilled as it goes goes on without a word of the next one.
        moved = true;
      } else if (before !== read.remaining && nowMs - (this.recorded?.atMs ?? 0) >= RECORD_EVERY_MS) {
        moved = true;
      } else if (before !== read.remaining && read.remaining < limit * TIGHT_SHARE) {
        moved = true;
      }
    }
    this.asOfMs = asOfMs;
    if (moved || reading.retryAfterMs !== undefined) {
      this.recorded = {
        atMs: nowMs,
        remaining: new Map(DIMENSIONS.flatMap((d) => (reading[d] ? [[d, reading[d].remaining]] : []))),
        // Only a reset a second or more off is a window whose end is worth a word: a bucket
        // nearly full says it is whole again in a few ms with every answer.
        resetAtMs: new Map(
          DIMENSIONS.flatMap((d) => {
            const resetAtMs = reading[d]?.resetAtMs ?? 0;
            return reading[d] !== undefined && resetAtMs - nowMs >= MIN_WINDOW_MS ? [[d, resetAtMs]] : [];
          }),
        ),
      };
      return true;
    }
    return false;
  }

  /**
   * Takes in a reading another gateway recorded (a RateLimitObserved event): the same as
   * one of this process's own answers, read at `readAtMs` from a call sent at `asOfMs`,
   * except that it is never recorded again.
   */
  learn(
    reading: RateLimitReading,
    asOfMs: number,
    readAtMs: number,
    shapes: Partial<Record<Dimension, WindowShape>> = {},
  ): void {
    for (const [dimension, shape] of Object.entries(shapes) as [Dimension, WindowShape][]) {
      this.told.set(dimension, shape);
    }
    if (reading.retryAfterMs !== undefined) this.coolDown(readAtMs + reading.retryAfterMs);
    if (asOfMs <= this.asOfMs) return;
    const refused = reading.retryAfterMs !== undefined;
    for (const dimension of DIMENSIONS) {
      const read = reading[dimension];
      // A recorded reset is to the millisecond; one that is not a whole second was written finer.
      const resolutionMs =
        read?.resetAtMs !== undefined && read.resetAtMs % 1_000 !== 0 ? 1 : SECOND_RESOLUTION_MS;
      if (read !== undefined)
        this.take(dimension, read, readAtMs, resolutionMs, refused ? undefined : asOfMs);
    }
    this.asOfMs = asOfMs;
  }

  /** A reading of one dimension: its shape learnt from it, and the window as it now stands. */
  private take(
    dimension: Dimension,
    read: WindowReading,
    readAtMs: number,
    resolutionMs: number,
    /** Undefined for a refusal (see ShapeTracker.observe). */
    sentAtMs: number | undefined,
  ): void {
    let tracker = this.shapes.get(dimension);
    if (tracker === undefined) {
      tracker = new ShapeTracker();
      this.shapes.set(dimension, tracker);
    }
    tracker.observe(read, readAtMs, resolutionMs, sentAtMs);
    const { periodMs } = tracker.view();
    this.dimensions.set(dimension, WindowState.from(read, readAtMs, this.shapeNow(dimension), periodMs));
  }

  /**
   * The shape a dimension is acted on as: the operator's, else what this process's readings
   * showed, else what another gateway's had shown it, else unknown.
   */
  private shapeNow(dimension: Dimension): WindowShape {
    if (this.declared !== undefined) return this.declared;
    const own = this.shapes.get(dimension)?.shape ?? "unknown";
    return own !== "unknown" ? own : (this.told.get(dimension) ?? "unknown");
  }

  /** How one dimension was read to refill, and from how many readings; undefined when never reported. */
  shapeOf(
    dimension: Dimension,
  ): (ShapeView & { readonly declared: boolean; readonly learnt: WindowShape }) | undefined {
    const view = this.shapes.get(dimension)?.view();
    if (view === undefined) return undefined;
    return {
      ...view,
      shape: this.shapeNow(dimension),
      declared: this.declared !== undefined,
      // What this process's own readings showed: the only shape it records for others.
      learnt: view.shape,
    };
  }

  /** An answer on this key carried no reading. */
  noteUnread(): void {
    this.unread += 1;
  }

  /** Answers came back on this key, and none of them said anything of its window. */
  get silent(): boolean {
    return this.unread > 0 && this.dimensions.size === 0;
  }

  /** The provider asked for no calls on this key before `untilMs` (a 429's retry-after). */
  coolDown(untilMs: number): void {
    this.cooldownUntilMs = Math.max(this.cooldownUntilMs, untilMs);
  }

  /** When the key may be called again after a 429 (0: no cooldown asked for). */
  coolingUntil(nowMs: number): number {
    return this.cooldownUntilMs > nowMs ? this.cooldownUntilMs : 0;
  }

  /** The dimensions the provider reports for this key. */
  known(): Dimension[] {
    return [...this.dimensions.keys()];
  }

  /** One dimension now; undefined when the provider never reported it. */
  view(dimension: Dimension, nowMs: number): DimensionView | undefined {
    const state = this.dimensions.get(dimension);
    if (state === undefined) return undefined;
    let reserved = 0;
    for (const call of this.inFlight.values()) {
      if (call.startedAtMs > this.asOfMs) reserved += call.need[dimension];
    }
    return {
      limit: state.limit,
      remaining: state.available(nowMs),
      reserved,
      resetAtMs: state.resetAtMs,
      shape: state.shape,
    };
  }

  /** When `amount` of one dimension is left, at the earliest; undefined when the window could never hold it. */
  availableAt(dimension: Dimension, amount: number, nowMs: number): number | undefined {
    return this.dimensions.get(dimension)?.availableAt(amount, nowMs);
  }

  /** When `amount`, more than the whole window of one dimension, will have refilled (see WindowState.refilledAt). */
  refilledAt(dimension: Dimension, amount: number, nowMs: number, fullMs: number): number | undefined {
    return this.dimensions.get(dimension)?.refilledAt(amount, nowMs, fullMs);
  }

  /** A call forwarded at `nowMs` reserves `need` until its answer (or failure) comes back. */
  reserve(call: object, need: Need, nowMs: number): void {
    this.inFlight.set(call, { startedAtMs: nowMs, need });
  }

  release(call: object): void {
    this.inFlight.delete(call);
  }

  /** Calls this process has in flight on the key. */
  get callsInFlight(): number {
    return this.inFlight.size;
  }
}

/**
 * Every provider key this process has seen, by key id. Bounded: past `max` keys the one
 * least recently used (and with nothing in flight) is forgotten.
 */
export class KeyWindows {
  private readonly windows = new Map<string, KeyWindow>();

  constructor(
    private readonly max = 10_000,
    /** The shape an operator said an upstream's windows have (`predict.window_shapes`); undefined: learnt. */
    private readonly knownShape: (upstream: string) => WindowShape | undefined = () => undefined,
  ) {}

  get(keyId: string): KeyWindow | undefined {
    return this.windows.get(keyId);
  }

  /** The key's window, made (empty) when it is new. */
  of(keyId: string, upstream: string): KeyWindow {
    let window = this.windows.get(keyId);
    if (window !== undefined) {
      this.windows.delete(keyId);
      this.windows.set(keyId, window);
      return window;
    }
    window = new KeyWindow(keyId, upstream, this.knownShape(upstream));
    this.windows.set(keyId, window);
    if (this.windows.size > this.max) {
      for (const [id, old] of this.windows) {
        if (old.callsInFlight > 0) continue;
        this.windows.delete(id);
        break;
      }
    }
    return window;
  }

  all(): KeyWindow[] {
    return [...this.windows.values()];
  }
}
