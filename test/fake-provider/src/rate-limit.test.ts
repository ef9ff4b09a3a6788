import { describe, expect, it } from "vitest";
import {
  anthropicRateLimitHeaders,
  formatDuration,
  RateLimiter,
  type RateLimitState,
  rateLimitHeaders,
  TokenBucket,
} from "./rate-limit.js";

function manualClock(start = 1_700_000_000_000) {
  let now = start;
  return {
    now: () => now,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

describe("TokenBucket", () => {
  it("starts full and refills continuously, capacity per minute, never above capacity", () => {
    const clock = manualClock();
    const bucket = new TokenBucket(600, clock.now);
    expect(bucket.level()).toBe(600);

    bucket.take(600);
    expect(bucket.level()).toBe(0);
    clock.advance(1_000);
    expect(bucket.level()).toBeCloseTo(10);
    clock.advance(29_000);
    expect(bucket.level()).toBeCloseTo(300);
    clock.advance(10 * 60_000);
    expect(bucket.level()).toBe(600);
  });

  it("says how long until a cost fits, and that a cost above capacity never fits", () => {
    const clock = manualClock();
    const bucket = new TokenBucket(60, clock.now);
    bucket.take(55);
    expect(bucket.waitMs(5)).toBe(0);
    expect(bucket.waitMs(8)).toBeCloseTo(3_000);
    expect(bucket.waitMs(61)).toBe(Number.POSITIVE_INFINITY);

    clock.advance(bucket.waitMs(8));
    expect(bucket.waitMs(8)).toBe(0);
  });

  it("reports the time until it is full again", () => {
    const clock = manualClock();
    const bucket = new TokenBucket(100, clock.now);
    expect(bucket.msUntilFull()).toBe(0);
    bucket.take(25);
    expect(bucket.msUntilFull()).toBeCloseTo(15_000);
  });
});

describe("RateLimiter", () => {
  it("takes one request and the tokens from the key's buckets", () => {
    const clock = manualClock();
    const limiter = new RateLimiter({ rpm: 10, tpm: 1_000 }, {}, clock.now);

    const decision = limiter.admit("sk-a", { tokens: 120 });

    expect(decision.allowed).toBe(true);
    expect(decision.state).toMatchObject({
      requests: { limit: 10, remaining: 9 },
      tokens: { limit: 1_000, remaining: 880 },
    });
    expect(decision.state.requests.resetMs).toBeCloseTo(6_000);
    expect(decision.state.tokens.resetMs).toBeCloseTo(7_200);
  });

  it("refuses a request that does not fit, takes nothing, and says when to retry", () => {
    const clock = manualClock();
    const limiter = new RateLimiter({ rpm: 100, tpm: 1_000 }, {}, clock.now);
    limiter.admit("sk-a", { tokens: 980 });

    const refused = limiter.admit("sk-a", { tokens: 120 });

    expect(refused).toMatchObject({
      allowed: false,
      kind: "tokens",
      limit: 1_000,
      used: 980,
      requested: 120,
    });
    expect(refused.allowed === false && refused.retryAfterMs).toBeCloseTo(6_000);
    expect(limiter.state("sk-a")).toMatchObject({ requests: { remaining: 99 }, tokens: { remaining: 20 } });

    clock.advance(6_000);
    expect(limiter.admit("sk-a", { tokens: 120 }).allowed).toBe(true);
  });

  it("refuses on requests when the request bucket is the one that is empty", () => {
    const clock = manualClock();
    const limiter = new RateLimiter({ rpm: 2, tpm: 1_000_000 }, {}, clock.now);
    limiter.admit("sk-a", { tokens: 1 });
    limiter.admit("sk-a", { tokens: 1 });

    const refused = limiter.admit("sk-a", { tokens: 1 });

    expect(refused).toMatchObject({ allowed: false, kind: "requests", limit: 2, used: 2, requested: 1 });
    expect(refused.allowed === false && refused.retryAfterMs).toBeCloseTo(30_000);
  });

  it("refuses for good a request larger than the whole token bucket", () => {
    const limiter = new RateLimiter({ rpm: 10, tpm: 100 }, {}, manualClock().now);
    const refused = limiter.admit("sk-a", { tokens: 101 });
    expect(refused).toMatchObject({ allowed: false, kind: "tokens", retryAfterMs: Number.POSITIVE_INFINITY });
  });

  it("keeps separate buckets per key, with limits overridden per key", () => {
    const limiter = new RateLimiter({ rpm: 10, tpm: 1_000 }, { "sk-small": { tpm: 50 } }, manualClock().now);
    expect(limiter.admit("sk-small", { tokens: 60 }).allowed).toBe(false);
    expect(limiter.admit("sk-other", { tokens: 60 }).allowed).toBe(true);
    expect(limiter.state("sk-small")).toMatchObject({
      requests: { limit: 10 },
      tokens: { limit: 50, remaining: 50 },
    });
  });

  it("meters input and output tokens apart, each bucket at tpm unless itpm or otpm says otherwise", () => {
    const clock = manualClock();
    const limiter = new RateLimiter({ rpm: 10, tpm: 1_000 }, { "sk-small": { otpm: 100 } }, clock.now);

    expect(limiter.admit("sk-small", { "input-tokens": 600, "output-tokens": 80 }).allowed).toBe(true);
    const refused = limiter.admit("sk-small", { "input-tokens": 10, "output-tokens": 50 });

    expect(refused).toMatchObject({
      allowed: false,
      kind: "output-tokens",
      limit: 100,
      used: 80,
      requested: 50,
    });
    expect(refused.allowed === false && refused.retryAfterMs).toBeCloseTo(18_000);
    expect(limiter.state("sk-small")).toMatchObject({
      requests: { remaining: 9 },
      tokens: { limit: 1_000, remaining: 1_000 },
      "input-tokens": { limit: 1_000, remaining: 400 },
      "output-tokens": { limit: 100, remaining: 20 },
    });
  });
});

describe("formatDuration", () => {
  it.each([
    [0, "0s"],
    [0.2, "1ms"],
    [120, "120ms"],
    [999.4, "1s"],
    [1_000, "1s"],
    [6_200, "6.2s"],
    [7_660, "7.66s"],
    [179_560, "2m59.56s"],
    [360_000, "6m0s"],
    [3_723_500, "1h2m3.5s"],
  ])("prints %s ms as %s", (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});

const state: RateLimitState = {
  requests: { limit: 500, remaining: 499, resetMs: 120 },
  tokens: { limit: 200_000, remaining: 199_880, resetMs: 36 },
  "input-tokens": { limit: 40_000, remaining: 39_000, resetMs: 1_500 },
  "output-tokens": { limit: 8_000, remaining: 7_000, resetMs: 7_500 },
};

describe("rateLimitHeaders", () => {
  it("gives OpenAI's six headers", () => {
    expect(rateLimitHeaders(state)).toEqual({
      "x-ratelimit-limit-requests": "500",
      "x-ratelimit-limit-tokens": "200000",
      "x-ratelimit-remaining-requests": "499",
      "x-ratelimit-remaining-tokens": "199880",
      "x-ratelimit-reset-requests": "120ms",
      "x-ratelimit-reset-tokens": "36ms",
    });
  });
});

describe("anthropicRateLimitHeaders", () => {
  it("gives Anthropic's headers with RFC 3339 resets in whole seconds, tokens the more restrictive bucket", () => {
    const now = Date.parse("2025-06-01T12:00:00.400Z");
    expect(anthropicRateLimitHeaders(state, now)).toEqual({
      "anthropic-ratelimit-requests-limit": "500",
      "anthropic-ratelimit-requests-remaining": "499",
      "anthropic-ratelimit-requests-reset": "2025-06-01T12:00:01Z",
      "anthropic-ratelimit-tokens-limit": "8000",
      "anthropic-ratelimit-tokens-remaining": "7000",
      "anthropic-ratelimit-tokens-reset": "2025-06-01T12:00:08Z",
      "anthropic-ratelimit-input-tokens-limit": "40000",
      "anthropic-ratelimit-input-tokens-remaining": "39000",
      "anthropic-ratelimit-input-tokens-reset": "2025-06-01T12:00:02Z",
      "anthropic-ratelimit-output-tokens-limit": "8000",
      "anthropic-ratelimit-output-tokens-remaining": "7000",
      "anthropic-ratelimit-output-tokens-reset": "2025-06-01T12:00:08Z",
    });
  });
});
