/** Milliseconds since the epoch, injectable so tests can move time by hand. */
export type Clock = () => number;

export interface RateLimits {
  /** Requests per minute. */
  readonly rpm: number;
  /** Tokens per minute. */
  readonly tpm: number;
}

const WINDOW_MS = 60_000;
// Refill is fractional, so a wait computed from the level can land a hair short of the cost.
const EPSILON = 1e-9;

/** A bucket of `capacity` units refilled continuously, `capacity` per minute. Starts full. */
export class TokenBucket {
  readonly #perMs: number;
  #level: number;
  #updatedAt: number;

  constructor(
    readonly capacity: number,
    private readonly clock: Clock,
  ) {
    if (!(capacity > 0)) throw new RangeError(`a rate limit must be above 0, got ${capacity}`);
    this.#perMs = capacity / WINDOW_MS;
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

/** What OpenAI reports in its `x-ratelimit-*` headers. */
export interface RateLimitState {
  readonly limitRequests: number;
  readonly limitTokens: number;
  readonly remainingRequests: number;
  readonly remainingTokens: number;
  readonly resetRequestsMs: number;
  readonly resetTokensMs: number;
}

export type RateDecision =
  | { readonly allowed: true; readonly state: RateLimitState }
  | {
      readonly allowed: false;
      readonly state: RateLimitState;
      /** The bucket that refused; OpenAI puts it in the error's `type`. */
      readonly kind: "requests" | "tokens";
      readonly limit: number;
      readonly used: number;
      readonly requested: number;
      /** Infinity when the request is larger than the whole bucket. */
      readonly retryAfterMs: number;
    };

interface Buckets {
  readonly requests: TokenBucket;
  readonly tokens: TokenBucket;
}

/** Two buckets per API key, requests and tokens; a request must fit both. */
export class RateLimiter {
  readonly #buckets = new Map<string, Buckets>();

  constructor(
    private readonly defaults: RateLimits,
    private readonly byKey: Readonly<Record<string, Partial<RateLimits>>>,
    private readonly clock: Clock,
  ) {}

  /** Takes one request and `tokens` tokens, or nothing at all when either does not fit. */
  admit(apiKey: string, tokens: number): RateDecision {
    const buckets = this.#bucketsOf(apiKey);
    const requestWait = buckets.requests.waitMs(1);
    const tokenWait = buckets.tokens.waitMs(tokens);
    if (requestWait === 0 && tokenWait === 0) {
      buckets.requests.take(1);
      buckets.tokens.take(tokens);
      return { allowed: true, state: stateOf(buckets) };
    }
    const [kind, bucket, requested] =
      requestWait >= tokenWait
        ? (["requests", buckets.requests, 1] as const)
        : (["tokens", buckets.tokens, tokens] as const);
    return {
      allowed: false,
      state: stateOf(buckets),
      kind,
      limit: bucket.capacity,
      used: Math.ceil(bucket.capacity - bucket.level()),
      requested,
      retryAfterMs: Math.max(requestWait, tokenWait),
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
      buckets = {
        requests: new TokenBucket(limits.rpm, this.clock),
        tokens: new TokenBucket(limits.tpm, this.clock),
      };
      this.#buckets.set(apiKey, buckets);
    }
    return buckets;
  }
}

function stateOf({ requests, tokens }: Buckets): RateLimitState {
  return {
    limitRequests: requests.capacity,
    limitTokens: tokens.capacity,
    remainingRequests: Math.floor(requests.level() + EPSILON),
    remainingTokens: Math.floor(tokens.level() + EPSILON),
    resetRequestsMs: requests.msUntilFull(),
    resetTokensMs: tokens.msUntilFull(),
  };
}

export function rateLimitHeaders(state: RateLimitState): Record<string, string> {
  return {
    "x-ratelimit-limit-requests": String(state.limitRequests),
    "x-ratelimit-limit-tokens": String(state.limitTokens),
    "x-ratelimit-remaining-requests": String(state.remainingRequests),
    "x-ratelimit-remaining-tokens": String(state.remainingTokens),
    "x-ratelimit-reset-requests": formatDuration(state.resetRequestsMs),
    "x-ratelimit-reset-tokens": formatDuration(state.resetTokensMs),
  };
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
