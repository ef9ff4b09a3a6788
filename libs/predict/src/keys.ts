import type { Dimension, RateLimitReading } from "./headers.js";
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
}

// A reading is worth recording when a dimension moved by this share of its limit since
// the last one recorded, or when the last one recorded is this old and anything moved;
// and every reading that moved while a dimension has less than TIGHT_SHARE of its limit
// left (other gateways on the key then need every one).
const RECORD_SHARE = 0.1;
const RECORD_EVERY_MS = 10_000;
const TIGHT_SHARE = 0.2;

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
  private readonly inFlight = new Map<object, InFlight>();
  private asOfMs = Number.NEGATIVE_INFINITY;
  private cooldownUntilMs = 0;
  private unread = 0;
  private recorded: { atMs: number; remaining: Map<Dimension, number> } | undefined;

  constructor(
    /** Hash of the upstream origin and the key: never the key itself. */
    readonly keyId: string,
    /** The upstream's origin (scheme://host:port). */
    readonly upstream: string,
  ) {}

  /**
   * Takes in a reading from the answer to a call started at `asOfMs`, read at `nowMs`.
   * True when it is worth recording as an event: the first, a move by a tenth of a
   * limit, a cooldown, or any move ten seconds after the last recorded one.
   */
  observe(reading: RateLimitReading, asOfMs: number, nowMs: number): boolean {
    if (reading.retryAfterMs !== undefined) this.coolDown(nowMs + reading.retryAfterMs);
    // An answer to an older call than the last reading's says less than it does.
    if (asOfMs < this.asOfMs) return reading.retryAfterMs !== undefined;
    let moved = false;
    for (const dimension of DIMENSIONS) {
      const read = reading[dimension];
      if (read === undefined) continue;
      this.dimensions.set(dimension, WindowState.from(read, nowMs));
      const before = this.recorded?.remaining.get(dimension);
      const limit = read.limit ?? read.remaining;
      if (before === undefined || Math.abs(before - read.remaining) >= Math.max(1, limit * RECORD_SHARE)) {
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
  learn(reading: RateLimitReading, asOfMs: number, readAtMs: number): void {
    if (reading.retryAfterMs !== undefined) this.coolDown(readAtMs + reading.retryAfterMs);
    if (asOfMs <= this.asOfMs) return;
    for (const dimension of DIMENSIONS) {
      const read = reading[dimension];
      if (read !== undefined) this.dimensions.set(dimension, WindowState.from(read, readAtMs));
    }
    this.asOfMs = asOfMs;
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

  constructor(private readonly max = 10_000) {}

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
    window = new KeyWindow(keyId, upstream);
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
