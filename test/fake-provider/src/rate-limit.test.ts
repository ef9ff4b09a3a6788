import { describe, expect, it } from "vitest";
import { formatDuration, RateLimiter, rateLimitHeaders, TokenBucket } from "./rate-limit.js";

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

    const decision = limiter.admit("sk-a", 120);

    expect(decision.allowed).toBe(true);
    expect(decision.state).toMatchObject({
      limitRequests: 10,
      limitTokens: 1_000,
      remainingRequests: 9,
      remainingTokens: 880,
    });
    expect(decision.state.resetRequestsMs).toBeCloseTo(6_000);
    expect(decision.state.resetTokensMs).toBeCloseTo(7_200);
  });

  it("refuses a request that does not fit, takes nothing, and says when to retry", () => {
    const clock = manualClock();
    const limiter = new RateLimiter({ rpm: 100, tpm: 1_000 }, {}, clock.now);
    limiter.admit("sk-a", 980);

    const refused = limiter.admit("sk-a", 120);

    expect(refused).toMatchObject({
      allowed: false,
      kind: "tokens",
      limit: 1_000,
      used: 980,
      requested: 120,
    });
    expect(refused.allowed === false && refused.retryAfterMs).toBeCloseTo(6_000);
    expect(limiter.state("sk-a")).toMatchObject({ remainingRequests: 99, remainingTokens: 20 });

    clock.advance(6_000);
    expect(limiter.admit("sk-a", 120).allowed).toBe(true);
  });

  it("refuses on requests when the request bucket is the one that is empty", () => {
    const clock = manualClock();
    const limiter = new RateLimiter({ rpm: 2, tpm: 1_000_000 }, {}, clock.now);
    limiter.admit("sk-a", 1);
    limiter.admit("sk-a", 1);

    const refused = limiter.admit("sk-a", 1);

    expect(refused).toMatchObject({ allowed: false, kind: "requests", limit: 2, used: 2, requested: 1 });
    expect(refused.allowed === false && refused.retryAfterMs).toBeCloseTo(30_000);
  });

  it("refuses for good a request larger than the whole token bucket", () => {
    const limiter = new RateLimiter({ rpm: 10, tpm: 100 }, {}, manualClock().now);
    const refused = limiter.admit("sk-a", 101);
    expect(refused).toMatchObject({ allowed: false, kind: "tokens", retryAfterMs: Number.POSITIVE_INFINITY });
  });

  it("keeps separate buckets per key, with limits overridden per key", () => {
    const limiter = new RateLimiter({ rpm: 10, tpm: 1_000 }, { "sk-small": { tpm: 50 } }, manualClock().now);
    expect(limiter.admit("sk-small", 60).allowed).toBe(false);
    expect(limiter.admit("sk-other", 60).allowed).toBe(true);
    expect(limiter.state("sk-small")).toMatchObject({
      limitRequests: 10,
      limitTokens: 50,
      remainingTokens: 50,
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

describe("rateLimitHeaders", () => {
  it("gives OpenAI's six headers, remaining rounded down", () => {
    expect(
      rateLimitHeaders({
        limitRequests: 500,
        limitTokens: 200_000,
        remainingRequests: 499,
        remainingTokens: 199_880,
        resetRequestsMs: 120,
        resetTokensMs: 36,
      }),
    ).toEqual({
      "x-ratelimit-limit-requests": "500",
      "x-ratelimit-limit-tokens": "200000",
      "x-ratelimit-remaining-requests": "499",
      "x-ratelimit-remaining-tokens": "199880",
      "x-ratelimit-reset-requests": "120ms",
      "x-ratelimit-reset-tokens": "36ms",
    });
  });
});
