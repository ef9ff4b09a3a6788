/** Milliseconds since the epoch, injectable so tests can move time by hand. */
export type Clock = () => number;

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
   * How long a bucket takes to refill from empty (default a minute, as providers' per-minute
   * limits do); shorter makes a benchmark's windows bind in seconds instead of minutes.
   */
  readonly windowMs?: number;
}

const WINDOW_MS = 60_000;
// Refill is fractional, so a wait computed from the level can land a hair short of the cost.
const EPSILON = 1e-9;

/** A bucket of `capacity` units refilled continuously, `capacity` per window (a minute). Starts full. */
export class TokenBucket {
  readonly #perMs: number;
  #level: number;
  #updatedAt: number;

  constructor(
    readonly capacity: number,
    private readonly clock: Clock,
    windowMs = WINDOW_MS,
  ) {
    if (!(capacity > 0)) throw new RangeError(`a rate limit must be above 0, got ${capacity}`);
    this.#perMs = capacity / windowMs;
    this.#level = capacity;
    this.#updatedAt = clock();
  }

  /** Units available now, fractional. */
  level(): number {
    const now = this.clock();
    const elapsed = Math.max(0, now - this.#updatedAt);
    this.#level = Math.min(this.capacity, this.#level + elapsed * this.#perMs);
    this.#updatedAt = now;
    return this.#level;
  }

  /** Milliseconds until `cost` fits: 0 when it fits now, Infinity when it never will. */
  waitMs(cost: number): number {
    if (cost > this.capacity) return Number.POSITIVE_INFINITY;
    const missing = cost - this.level();
    return missing <= EPSILON ? 0 : missing / this.#perMs;
  }

  /** Takes `cost` units; the caller checked `waitMs(cost) === 0`. */
  take(cost: number): void {
    this.#level = Math.max(0, this.level() - cost);
  }

  msUntilFull(): number {
    return (this.capacity - this.level()) / this.#perMs;
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
  /** Milliseconds until the bucket is full again. */
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

type Buckets = Readonly<Record<LimitKind, TokenBucket>>;

/** Tokens a request takes from its key's token buckets; it always takes one request. */
export type TokenCosts = Partial<Record<Exclude<LimitKind, "requests">, number>>;

/** Four buckets per API key; a request must fit every bucket it takes from. */
export class RateLimiter {
  readonly #buckets = new Map<string, Buckets>();

  constructor(
    private readonly defaults: RateLimits,
    private readonly byKey: Readonly<Record<string, Partial<RateLimits>>>,
    private readonly clock: Clock,
  ) {}

  /** Takes one request and `costs` from the key's buckets, or nothing at all when one does not fit. */
  admit(apiKey: string, costs: TokenCosts): RateDecision {
    const buckets = this.#bucketsOf(apiKey);
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
    return stateOf(this.#bucketsOf(apiKey));
  }

  #bucketsOf(apiKey: string): Buckets {
    let buckets = this.#buckets.get(apiKey);
    if (buckets === undefined) {
      const limits = { ...this.defaults, ...this.byKey[apiKey] };
      const windowMs = limits.windowMs ?? WINDOW_MS;
      buckets = {
        requests: new TokenBucket(limits.rpm, this.clock, windowMs),
        tokens: new TokenBucket(limits.tpm, this.clock, windowMs),
        "input-tokens": new TokenBucket(limits.itpm ?? limits.tpm, this.clock, windowMs),
        "output-tokens": new TokenBucket(limits.otpm ?? limits.tpm, this.clock, windowMs),
      };
      this.#buckets.set(apiKey, buckets);
    }
    return buckets;
  }
}

function stateOf(buckets: Buckets): RateLimitState {
  const of = (bucket: TokenBucket): BucketState => ({
    limit: bucket.capacity,
    remaining: Math.floor(bucket.level() + EPSILON),
    resetMs: bucket.msUntilFull(),
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
