/**
 * How a provider key that reports no window (no rate-limit headers, only a 429 and its
 * retry-after when it refuses) is kept from refusing: by how many calls this process has
 * on it at once, found as TCP and Netflix's concurrency-limits find a congestion window
 * (AIMD). With no figures to read, the only signal is the refusal itself, so the limit is
 * learned from refusals and successes:
 *
 * - unlimited until the key first refuses: a key that never said no is never slowed;
 * - a 429 halves it, from what was actually in flight then (multiplicative decrease), at
 *   most once per retry-after: the refusals of one overshoot come back together, and each
 *   counting again would collapse the limit to 1 for what was one mistake;
 * - each call answered raises it by 1/limit, so one more call at once per window of
 *   successes (additive increase), while the key uses at least half of it.
 *
 * Pure: no timers and no I/O; the clock's reading is passed in. A call's turn is a promise
 * resolved when a slot is free for it, higher priority first and first come first served
 * within a priority.
 */

export interface ConcurrencyOptions {
  /** What the limit is multiplied by on a 429 (TCP's and Netflix's AIMD halve it). */
  readonly backoff?: number;
  /** The most the limit grows to. */
  readonly max?: number;
  /** The shortest time between two decreases, when the 429 asks for less (or no) wait. */
  readonly minPeriodMs?: number;
}

// Halving is what TCP Reno and Netflix's AIMD do: after it the key gets half the calls at
// once that overshot, which is below whatever the rate limit allowed at that latency.
const BACKOFF = 0.5;
// Only keeps the figure finite: a process with more calls than this at once on one key is
// past what one gateway sends, and the limit grows only while at least half of it is used,
// so it does not drift far above what the key actually carries.
const MAX_LIMIT = 1_000;
// A 429 with no retry-after (or one shorter than this) still names the refusals of one
// overshoot: they come back within about one call's latency of each other.
const MIN_PERIOD_MS = 1_000;

/** A 429 on the key: when it came, when its attempt was sent, and what wait it asked for. */
export interface Refusal {
  readonly nowMs: number;
  readonly sentAtMs: number;
  /** The retry-after it asked for (ms), when it asked for one. */
  readonly retryAfterMs?: number;
}

interface Waiting {
  readonly holder: object;
  readonly priority: number;
  readonly grant: () => void;
  readonly turn: Promise<void>;
}

/** One key's limit on calls at once, its slots, and the calls waiting for one. */
export class ConcurrencyLimit {
  readonly #backoff: number;
  readonly #max: number;
  readonly #minPeriodMs: number;
  #limit = Number.POSITIVE_INFINITY;
  // Successes since the limit last moved: `limit` of them (a window's worth) add one.
  #successes = 0;
  readonly #holders = new Set<object>();
  readonly #queue: Waiting[] = [];
  #decreasedAtMs = Number.NEGATIVE_INFINITY;
  #steadyUntilMs = Number.NEGATIVE_INFINITY;

  constructor(options: ConcurrencyOptions = {}) {
    this.#backoff = options.backoff ?? BACKOFF;
    this.#max = options.max ?? MAX_LIMIT;
    this.#minPeriodMs = options.minPeriodMs ?? MIN_PERIOD_MS;
  }

  /** Calls at once the key is given now: Infinity until its first 429, at least 1 after. */
  get limit(): number {
    return this.#limit;
  }

  /** Calls holding a slot. */
  get inFlight(): number {
    return this.#holders.size;
  }

  /** Calls waiting for a slot. */
  get waiting(): number {
    return this.#queue.length;
  }

  /** Whether `holder` holds a slot. */
  holds(holder: object): boolean {
    return this.#holders.has(holder);
  }

  /**
   * A slot for `holder`: true when it has one now (or already had); otherwise the promise of
   * its turn, resolved once a slot is its own (it then holds it: `release` gives it back).
   * Asked again while waiting, the same turn.
   */
  acquire(holder: object, priority = 0): true | Promise<void> {
    if (this.#holders.has(holder)) return true;
    const queued = this.#queue.find((waiting) => waiting.holder === holder);
    if (queued !== undefined) return queued.turn;
    if (this.#queue.length === 0 && this.#holders.size < this.limit) {
      this.#holders.add(holder);
      return true;
    }
    let grant: () => void = () => undefined;
    const turn = new Promise<void>((resolve) => {
      grant = resolve;
    });
    // Behind every waiting call of its priority or higher: first come first served within one.
    const at = this.#queue.findIndex((waiting) => waiting.priority < priority);
    const entry = { holder, priority, grant, turn };
    if (at === -1) this.#queue.push(entry);
    else this.#queue.splice(at, 0, entry);
    return turn;
  }

  /** Gives back `holder`'s slot, or its place in the queue; nothing when it has neither. */
  release(holder: object): void {
    if (!this.#holders.delete(holder)) {
      const at = this.#queue.findIndex((waiting) => waiting.holder === holder);
      if (at !== -1) this.#queue.splice(at, 1);
    }
    this.#grant();
  }

  /**
   * A 429 on the key: the limit becomes half of what was in flight (at least 1), unless it
   * was already lowered for the same overshoot: within the period the last decrease began
   * (its retry-after, at least a second), or for an attempt sent before that decrease (it
   * went out under the old limit, as TCP counts one loss per window). True when it lowered it.
   */
  refused(refusal: Refusal): boolean {
    if (refusal.nowMs < this.#steadyUntilMs || refusal.sentAtMs < this.#decreasedAtMs) return false;
    const inFlight = Math.min(this.#limit, Math.max(1, this.#holders.size));
    this.#limit = Math.max(1, Math.floor(inFlight * this.#backoff));
    this.#successes = 0;
    this.#decreasedAtMs = refusal.nowMs;
    this.#steadyUntilMs = refusal.nowMs + Math.max(this.#minPeriodMs, refusal.retryAfterMs ?? 0);
    return true;
  }

  /**
   * A call on the key answered: the limit grows by 1/limit, counted in whole calls (one more
   * once `limit` calls have succeeded since it last moved). Not while it is unlimited, nor
   * while less than half of it is in use: a success then says nothing of whether more calls
   * at once would be refused (TCP's congestion window validation, RFC 7661).
   */
  succeeded(): void {
    if (!Number.isFinite(this.#limit) || this.#holders.size * 2 < this.#limit) return;
    this.#successes += 1;
    if (this.#successes < this.#limit) return;
    this.#successes = 0;
    this.#limit = Math.min(this.#max, this.#limit + 1);
    this.#grant();
  }

  /** Nothing in flight or waiting: forgetting it loses only the limit learned. */
  get idle(): boolean {
    return this.#holders.size === 0 && this.#queue.length === 0;
  }

  #grant(): void {
    while (this.#queue.length > 0 && this.#holders.size < this.limit) {
      const next = this.#queue.shift()!;
      this.#holders.add(next.holder);
      next.grant();
    }
  }
}

/**
 * The limits of every key this process calls, by key id. Bounded: past `max` keys the one
 * least recently used with nothing in flight or waiting is forgotten.
 */
export class ConcurrencyLimits {
  private readonly limits = new Map<string, ConcurrencyLimit>();

  constructor(
    private readonly options: ConcurrencyOptions = {},
    private readonly max = 10_000,
  ) {}

  get(keyId: string): ConcurrencyLimit | undefined {
    return this.limits.get(keyId);
  }

  /** The key's limit, made (unlimited) when it is new. */
  of(keyId: string): ConcurrencyLimit {
    let limit = this.limits.get(keyId);
    if (limit !== undefined) {
      this.limits.delete(keyId);
      this.limits.set(keyId, limit);
      return limit;
    }
    limit = new ConcurrencyLimit(this.options);
    this.limits.set(keyId, limit);
    if (this.limits.size > this.max) {
      for (const [id, old] of this.limits) {
        if (!old.idle) continue;
        this.limits.delete(id);
        break;
      }
    }
    return limit;
  }
}
