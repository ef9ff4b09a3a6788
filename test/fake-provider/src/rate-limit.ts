/** Milliseconds since the epoch, injectable so tests can move time by hand. */
export type Clock = () => number;

/**
 * How a key's limits come back after use, and what its answers say about them:
 * - `continuous`: a token bucket, refilled steadily (OpenAI's and Anthropic's own); the reset
 *   headers say when it is full again.
 * - `fixed`: the whole window at the start of each period, periods aligned on the clock at
 *   multiples of the window (as minute boundaries are); nothing comes back until the period ends,
 *   and the reset headers name that end.
 * - `sliding`: what the key spent counts against it for one window after it spent it; the reset
 *   headers say when the newest spend has expired.
 * - `none`: accounted as `continuous`, but the answers carry no rate-limit headers at all, and a
 *   429 only `retry-after` in whole seconds, as many OpenAI-compatible servers answer.
 */
export type WindowMode = "continuous" | "fixed" | "sliding" | "none";

export const WINDOW_MODES: readonly WindowMode[] = ["continuous", "fixed", "sliding", "none"];

export interface RateLimits {
  /** Requests per minute. */
  readonly rpm: number;
  /** Tokens per minute, prompt and output together (OpenAI's TPM). */
  readonly tpm: number;
  /** Input tokens per minute (Anthropic's ITPM); default `tpm`. */
  readonly itpm?: number;
  /** Output tokens per minute (Anthropic's OTPM); default `tpm`. */
  readonly otpm?: number;
  /**
   * The window the limits are per (default a minute, as providers' per-minute limits are):
   * how long a bucket takes to refill from empty, a fixed period, or a sliding log's span.
   * Shorter makes a benchmark's windows bind in seconds instead of minutes.
   */
  readonly windowMs?: number;
  /** Default `continuous`. */
  readonly mode?: WindowMode;
}

const WINDOW_MS = 60_000;
// Refill is fractional, so a wait computed from the level can land a hair short of the cost.
const EPSILON = 1e-9;

/** One limit of one key: `capacity` units per window, however the window gives them back. */
export interface Window {
  readonly capacity: number;
  /** Units available now, possibly fractional. */
  level(): number;
  /** Milliseconds until `cost` fits: 0 when it fits now, Infinity when it never will. */
  waitMs(cost: number): number;
  /** Takes `cost` units; the caller checked `waitMs(cost) === 0`. */
  take(cost: number): void;
  /** Milliseconds until the reset the rate-limit headers report. */
  resetMs(): number;
}

/** A bucket of `capacity` units refilled continuously, `capacity` per window (a minute). Starts full. */
export class TokenBucket implements Window {
  readonly #perMs: number;
  #level: number;
  #updatedAt: number;

  constructor(
    readonly capacity: number,
    private readonly clock: Clock,
    windowMs = WINDOW_MS,
  ) {
    checkLimit(capacity, windowMs);
    this.#perMs = capacity / windowMs;
    this.#level = capacity;
    this.#updatedAt = clock();
  }

  level(): number {
    const now = this.clock();
    const elapsed = Math.max(0, now - this.#updatedAt);
    this.#level = Math.min(this.capacity, this.#level + elapsed * this.#perMs);
    this.#updatedAt = now;
    return this.#level;
  }

  waitMs(cost: number): number {
    if (cost > this.capacity) return Number.POSITIVE_INFINITY;
    const missing = cost - this.level();
    return missing <= EPSILON ? 0 : missing / this.#perMs;
  }

  take(cost: number): void {
    this.#level = Math.max(0, this.level() - cost);
  }

  /** Until the bucket is full again. */
  resetMs(): number {
    return (this.capacity - this.level()) / this.#perMs;
  }
}

/**
 * `capacity` units per period, whole again at the start of each; periods start at multiples of
 * `windowMs` since the epoch, so every key's periods end at the same instants, as minute
 * boundaries do.
 */
export class FixedWindow implements Window {
  #periodStart = Number.NEGATIVE_INFINITY;
  #used = 0;

  constructor(
    readonly capacity: number,
    private readonly clock: Clock,
    private readonly windowMs = WINDOW_MS,
  ) {
    checkLimit(capacity, windowMs);
  }

  level(): number {
    this.#now();
    return this.capacity - this.#used;
  }

  waitMs(cost: number): number {
    if (cost > this.capacity) return Number.POSITIVE_INFINITY;
    const now = this.#now();
    return this.#used + cost <= this.capacity ? 0 : this.#periodStart + this.windowMs - now;
  }

  take(cost: number): void {
    this.#now();
    this.#used = Math.min(this.capacity, this.#used + cost);
  }

  /** Until the period ends, used or not: the same instant for every answer in one period. */
  resetMs(): number {
    const now = this.#now();
    return this.#periodStart + this.windowMs - now;
  }

  /** The clock, after moving to the period it is in (never back, should the clock step back). */
  #now(): number {
    const now = this.clock();
    const start = Math.floor(now / this.windowMs) * this.windowMs;
    if (start > this.#periodStart) {
      this.#periodStart = start;
      this.#used = 0;
    }
    return now;
  }
}

/**
 * A sliding log: what was spent at `t` counts until `t + windowMs`. Kept as a queue of
 * (time, cost), the expired dropped from the front, spends in the same millisecond merged, so it
 * holds at most one entry per millisecond of the window and per call.
 */
export class SlidingWindow implements Window {
  readonly #times: number[] = [];
  readonly #costs: number[] = [];
  #head = 0;
  #spent = 0;

  constructor(
    readonly capacity: number,
    private readonly clock: Clock,
    private readonly windowMs = WINDOW_MS,
  ) {
    checkLimit(capacity, windowMs);
  }

  level(): number {
    this.#expire();
    return this.capacity - this.#spent;
  }

  waitMs(cost: number): number {
    if (cost > this.capacity) return Number.POSITIVE_INFINITY;
    const now = this.#expire();
    let over = this.#spent + cost - this.capacity;
    if (over <= EPSILON) return 0;
    // The oldest spends expire first: the call fits once enough of them have.
    for (let i = this.#head; i < this.#times.length; i++) {
      over -= this.#costs[i]!;
      if (over <= EPSILON) return this.#times[i]! + this.windowMs - now;
    }
    // Unreachable: with everything expired, the spent is 0 and cost ≤ capacity fits.
    return this.windowMs;
  }

  take(cost: number): void {
    const now = this.#expire();
    this.#spent += cost;
    const last = this.#times.length - 1;
    if (last >= this.#head && this.#times[last] === now) this.#costs[last]! += cost;
    else {
      this.#times.push(now);
      this.#costs.push(cost);
    }
  }

  /** Until the newest spend has expired and the whole window is back; 0 when nothing counts. */
  resetMs(): number {
    const now = this.#expire();
    const last = this.#times.length - 1;
    return last < this.#head ? 0 : this.#times[last]! + this.windowMs - now;
  }

  #expire(): number {
    const now = this.clock();
    while (this.#head < this.#times.length && this.#times[this.#head]! + this.windowMs <= now) {
      this.#spent -= this.#costs[this.#head]!;
      this.#head += 1;
    }
    if (this.#head === this.#times.length) {
      this.#times.length = 0;
      this.#costs.length = 0;
      this.#head = 0;
      this.#spent = 0;
    } else if (this.#head >= 1_024 && this.#head * 2 >= this.#times.length) {
      // Drop the expired front in one go once it is most of the arrays, so a take stays O(1) amortised.
      this.#times.splice(0, this.#head);
      this.#costs.splice(0, this.#head);
      this.#head = 0;
    }
    return now;
  }
}

function checkLimit(capacity: number, windowMs: number): void {
  if (!(capacity > 0)) throw new RangeError(`a rate limit must be above 0, got ${capacity}`);
  if (!(windowMs > 0)) throw new RangeError(`a rate-limit window must be above 0 ms, got ${windowMs}`);
}

/** A window of `mode`; `none` counts as a continuous bucket and differs only in what the answers say. */
export function windowOf(mode: WindowMode, capacity: number, clock: Clock, windowMs = WINDOW_MS): Window {
  switch (mode) {
    case "continuous":
    case "none":
      return new TokenBucket(capacity, clock, windowMs);
    case "fixed":
      return new FixedWindow(capacity, clock, windowMs);
    case "sliding":
      return new SlidingWindow(capacity, clock, windowMs);
    default:
      throw new RangeError(`a window mode is one of ${WINDOW_MODES.join(", ")}, got '${String(mode)}'`);
  }
}

/**
 * The buckets of one key. OpenAI limits `requests` and `tokens` (prompt and output together);
 * Anthropic limits `requests`, `input-tokens` and `output-tokens` apart.
 */
export type LimitKind = "requests" | "tokens" | "input-tokens" | "output-tokens";

export interface BucketState {
  readonly limit: number;
  /** Whole units left now, rounded down. */
  readonly remaining: number;
  /** Milliseconds until the reset the headers report (see `WindowMode`). */
  readonly resetMs: number;
}

/** What the rate-limit headers report. */
export type RateLimitState = Readonly<Record<LimitKind, BucketState>>;

export type RateDecision =
  | { readonly allowed: true; readonly state: RateLimitState }
  | {
      readonly allowed: false;
      readonly state: RateLimitState;
      /** The bucket that refused; OpenAI puts it in the error's `type`. */
      readonly kind: LimitKind;
      readonly limit: number;
      readonly used: number;
      readonly requested: number;
      /** Infinity when the request is larger than the whole bucket. */
      readonly retryAfterMs: number;
    };

type Buckets = Readonly<Record<LimitKind, Window>>;

interface KeyLimits {
  readonly mode: WindowMode;
  readonly buckets: Buckets;
}

/** Tokens a request takes from its key's token buckets; it always takes one request. */
export type TokenCosts = Partial<Record<Exclude<LimitKind, "requests">, number>>;

/** Four windows per API key, of the key's mode; a request must fit every window it takes from. */
export class RateLimiter {
  readonly #keys = new Map<string, KeyLimits>();

  constructor(
    private readonly defaults: RateLimits,
    private readonly byKey: Readonly<Record<string, Partial<RateLimits>>>,
    private readonly clock: Clock,
  ) {}

  /** Takes one request and `costs` from the key's buckets, or nothing at all when one does not fit. */
  admit(apiKey: string, costs: TokenCosts): RateDecision {
    const { buckets } = this.#limitsOf(apiKey);
    const wanted: Array<[LimitKind, number]> = [["requests", 1]];
    for (const [kind, cost] of Object.entries(costs) as Array<[LimitKind, number]>) wanted.push([kind, cost]);

    // The bucket that makes the request wait longest refuses it; on a tie, requests.
    let refusing: [LimitKind, number, number] | undefined;
    for (const [kind, cost] of wanted) {
      const waitMs = buckets[kind].waitMs(cost);
      if (waitMs > 0 && (refusing === undefined || waitMs > refusing[2])) refusing = [kind, cost, waitMs];
    }
    if (refusing === undefined) {
      for (const [kind, cost] of wanted) buckets[kind].take(cost);
      return { allowed: true, state: stateOf(buckets) };
    }
    const [kind, requested, retryAfterMs] = refusing;
    const bucket = buckets[kind];
    return {
      allowed: false,
      state: stateOf(buckets),
      kind,
      limit: bucket.capacity,
      used: Math.ceil(bucket.capacity - bucket.level()),
      requested,
      retryAfterMs,
    };
  }

  /** The headers' view of a key's buckets, without taking anything. */
  state(apiKey: string): RateLimitState {
    return stateOf(this.#limitsOf(apiKey).buckets);
  }

  /** The key's window mode; under `none` its answers carry no rate-limit headers. */
  mode(apiKey: string): WindowMode {
    return this.#limitsOf(apiKey).mode;
  }

  #limitsOf(apiKey: string): KeyLimits {
    let key = this.#keys.get(apiKey);
    if (key === undefined) {
      const limits = { ...this.defaults, ...this.byKey[apiKey] };
      const mode = limits.mode ?? "continuous";
      const windowMs = limits.windowMs ?? WINDOW_MS;
      const of = (capacity: number) => windowOf(mode, capacity, this.clock, windowMs);
      key = {
        mode,
        buckets: {
          requests: of(limits.rpm),
          tokens: of(limits.tpm),
          "input-tokens": of(limits.itpm ?? limits.tpm),
          "output-tokens": of(limits.otpm ?? limits.tpm),
        },
      };
      this.#keys.set(apiKey, key);
    }
    return key;
  }
}

function stateOf(buckets: Buckets): RateLimitState {
  const of = (bucket: Window): BucketState => ({
    limit: bucket.capacity,
    remaining: Math.floor(bucket.level() + EPSILON),
    resetMs: bucket.resetMs(),
  });
  return {
    requests: of(buckets.requests),
    tokens: of(buckets.tokens),
    "input-tokens": of(buckets["input-tokens"]),
    "output-tokens": of(buckets["output-tokens"]),
  };
}

/** OpenAI's `x-ratelimit-*` headers. */
export function rateLimitHeaders(state: RateLimitState): Record<string, string> {
  return {
    "x-ratelimit-limit-requests": String(state.requests.limit),
    "x-ratelimit-limit-tokens": String(state.tokens.limit),
    "x-ratelimit-remaining-requests": String(state.requests.remaining),
    "x-ratelimit-remaining-tokens": String(state.tokens.remaining),
    "x-ratelimit-reset-requests": formatDuration(state.requests.resetMs),
    "x-ratelimit-reset-tokens": formatDuration(state.tokens.resetMs),
  };
}

/**
 * Anthropic's `anthropic-ratelimit-*` headers: limit, remaining, and when the bucket is full
 * again as an RFC 3339 time, at `now`. The `tokens` family reports whichever of the input and
 * output buckets is more restrictive now.
 */
export function anthropicRateLimitHeaders(state: RateLimitState, now: number): Record<string, string> {
  const input = state["input-tokens"];
  const output = state["output-tokens"];
  const families: Array<[string, BucketState]> = [
    ["requests", state.requests],
    ["tokens", output.remaining < input.remaining ? output : input],
    ["input-tokens", input],
    ["output-tokens", output],
  ];
  const headers: Record<string, string> = {};
  for (const [family, bucket] of families) {
    headers[`anthropic-ratelimit-${family}-limit`] = String(bucket.limit);
    headers[`anthropic-ratelimit-${family}-remaining`] = String(bucket.remaining);
    headers[`anthropic-ratelimit-${family}-reset`] = rfc3339(now + bucket.resetMs);
  }
  return headers;
}

/** Whole seconds, rounded up so a client that waits until then is never early, as Anthropic prints them. */
function rfc3339(ms: number): string {
  return new Date(Math.ceil((ms - EPSILON) / 1000) * 1000).toISOString().replace(".000Z", "Z");
}

/**
 * OpenAI's duration format, which is Go's `time.Duration` printed at millisecond precision:
 * "120ms", "1s", "7.66s", "6m0s", "1h2m3.5s". Rounded up, so a client that waits this long
 * is never early.
 */
export function formatDuration(ms: number): string {
  const total = Math.ceil(ms - EPSILON);
  if (total <= 0) return "0s";
  if (total < 1000) return `${total}ms`;
  const hours = Math.floor(total / 3_600_000);
  const minutes = Math.floor((total % 3_600_000) / 60_000);
  const millis = total % 60_000;
  const whole = Math.floor(millis / 1000);
  const fraction = String(millis % 1000)
    .padStart(3, "0")
    .replace(/0+$/, "");
  const seconds = `${whole}${fraction === "" ? "" : `.${fraction}`}s`;
  if (hours > 0) return `${hours}h${minutes}m${seconds}`;
  if (minutes > 0) return `${minutes}m${seconds}`;
  return seconds;
}
