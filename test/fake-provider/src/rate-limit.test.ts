import { describe, expect, it } from "vitest";
import {
  anthropicRateLimitHeaders,
  FixedWindow,
  formatDuration,
  RateLimiter,
  type RateLimitState,
  rateLimitHeaders,
  SlidingWindow,
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
    expect(bucket.resetMs()).toBe(0);
    bucket.take(25);
    expect(bucket.resetMs()).toBeCloseTo(15_000);
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

// 1_700_000_000_000 is 20 s into a minute: the minute it is in ends 40 s later.
const TO_MINUTE_END = 40_000;

describe("FixedWindow", () => {
  it("stays flat through its period and is whole again at the period boundary, not before", () => {
    const clock = manualClock();
    const window = new FixedWindow(600, clock.now);
    expect(window.level()).toBe(600);

    window.take(600);
    clock.advance(30_000);
    // A continuous bucket would be half full by now.
    expect(window.level()).toBe(0);
    clock.advance(TO_MINUTE_END - 30_000 - 1);
    expect(window.level()).toBe(0);
    clock.advance(1);
    expect(window.level()).toBe(600);
  });

  it("aligns its periods on multiples of the window, whenever it was made", () => {
    const clock = manualClock(10_500);
    const window = new FixedWindow(10, clock.now, 1_000);
    window.take(10);
    clock.advance(499);
    expect(window.level()).toBe(0);
    clock.advance(1);
    expect(window.level()).toBe(10);
  });

  it("reports the same reset instant for every answer in one period, used or not", () => {
    const clock = manualClock();
    const window = new FixedWindow(100, clock.now);
    const start = clock.now();
    expect(window.resetMs()).toBe(TO_MINUTE_END);

    window.take(30);
    clock.advance(12_345);
    expect(clock.now() + window.resetMs()).toBe(start + TO_MINUTE_END);
    window.take(30);
    clock.advance(20_000);
    expect(clock.now() + window.resetMs()).toBe(start + TO_MINUTE_END);

    clock.advance(TO_MINUTE_END - 32_345);
    expect(window.resetMs()).toBe(60_000);
  });

  it("makes a call that does not fit wait until the period ends, and one above capacity wait forever", () => {
    const clock = manualClock();
    const window = new FixedWindow(100, clock.now);
    window.take(70);
    clock.advance(5_000);
    expect(window.waitMs(30)).toBe(0);
    expect(window.waitMs(31)).toBe(TO_MINUTE_END - 5_000);
    expect(window.waitMs(101)).toBe(Number.POSITIVE_INFINITY);

    clock.advance(window.waitMs(31));
    expect(window.waitMs(100)).toBe(0);
  });
});

describe("SlidingWindow", () => {
  it("frees exactly what was spent one window ago, when that window has passed", () => {
    const clock = manualClock();
    const window = new SlidingWindow(600, clock.now);
    window.take(100);
    clock.advance(10_000);
    window.take(200);
    clock.advance(10_000);
    window.take(300);
    expect(window.level()).toBe(0);

    // t = 20 s; the 100 spent at 0 s counts until 60 s.
    clock.advance(39_999);
    expect(window.level()).toBe(0);
    clock.advance(1);
    expect(window.level()).toBe(100);
    clock.advance(9_999);
    expect(window.level()).toBe(100);
    clock.advance(1);
    expect(window.level()).toBe(300);
    clock.advance(10_000);
    expect(window.level()).toBe(600);
  });

  it("makes a call wait until enough of the oldest spends have expired for it to fit", () => {
    const clock = manualClock();
    const window = new SlidingWindow(600, clock.now);
    window.take(100);
    clock.advance(10_000);
    window.take(200);
    clock.advance(10_000);
    window.take(250);

    // 50 left at 20 s.
    expect(window.waitMs(50)).toBe(0);
    expect(window.waitMs(150)).toBe(40_000);
    expect(window.waitMs(151)).toBe(50_000);
    expect(window.waitMs(350)).toBe(50_000);
    expect(window.waitMs(351)).toBe(60_000);
    expect(window.waitMs(601)).toBe(Number.POSITIVE_INFINITY);

    clock.advance(window.waitMs(151));
    expect(window.waitMs(151)).toBe(0);
  });

  it("reports the reset as when the newest spend expires, and 0 when nothing counts", () => {
    const clock = manualClock();
    const window = new SlidingWindow(100, clock.now);
    expect(window.resetMs()).toBe(0);
    window.take(10);
    clock.advance(15_000);
    window.take(10);
    clock.advance(5_000);
    expect(window.resetMs()).toBe(55_000);
    clock.advance(55_000);
    expect(window.resetMs()).toBe(0);
    expect(window.level()).toBe(100);
  });

  it("keeps counting right over many windows of small spends", () => {
    const clock = manualClock();
    const window = new SlidingWindow(1_000, clock.now, 1_000);
    // One unit every 10 ms for 100 windows: 10 ms after a spend, the window back to 10 ms after
    // the one before it holds 99 of them.
    for (let i = 0; i < 10_000; i++) {
      window.take(1);
      clock.advance(10);
      expect(window.level()).toBe(i < 99 ? 1_000 - (i + 1) : 901);
    }
    // Two in the same millisecond count as two, and expire together.
    window.take(1);
    window.take(1);
    expect(window.level()).toBe(899);
    clock.advance(999);
    expect(window.level()).toBe(998);
    clock.advance(1);
    expect(window.level()).toBe(1_000);
  });
});

describe("RateLimiter window modes", () => {
  it("gives each key its own mode, the default's unless the key says otherwise", () => {
    const clock = manualClock();
    const limiter = new RateLimiter(
      { rpm: 10, tpm: 1_000, mode: "fixed" },
      { "sk-sliding": { mode: "sliding" }, "sk-none": { mode: "none" } },
      clock.now,
    );
    for (const key of ["sk-fixed", "sk-sliding", "sk-none"]) limiter.admit(key, { tokens: 600 });
    clock.advance(30_000);

    expect(limiter.mode("sk-fixed")).toBe("fixed");
    expect(limiter.mode("sk-sliding")).toBe("sliding");
    expect(limiter.mode("sk-none")).toBe("none");
    expect(limiter.state("sk-fixed").tokens).toEqual({ limit: 1_000, remaining: 400, resetMs: 10_000 });
    expect(limiter.state("sk-sliding").tokens).toEqual({ limit: 1_000, remaining: 400, resetMs: 30_000 });
    // `none` counts as a continuous bucket: half the window back after half a minute.
    expect(limiter.state("sk-none").tokens.remaining).toBe(900);
    expect(new RateLimiter({ rpm: 1, tpm: 1 }, {}, clock.now).mode("sk-any")).toBe("continuous");
  });

  it("refuses in fixed mode until the period ends, on every limit of the key", () => {
    const clock = manualClock();
    const limiter = new RateLimiter({ rpm: 2, tpm: 1_000, mode: "fixed" }, {}, clock.now);
    limiter.admit("sk-a", { tokens: 900 });
    clock.advance(1_000);

    const onTokens = limiter.admit("sk-a", { tokens: 200 });
    expect(onTokens).toMatchObject({
      allowed: false,
      kind: "tokens",
      used: 900,
      retryAfterMs: TO_MINUTE_END - 1_000,
    });
    limiter.admit("sk-a", { tokens: 10 });
    const onRequests = limiter.admit("sk-a", { tokens: 10 });
    expect(onRequests).toMatchObject({
      allowed: false,
      kind: "requests",
      retryAfterMs: TO_MINUTE_END - 1_000,
    });
    expect(limiter.admit("sk-a", { tokens: 1_001 })).toMatchObject({
      allowed: false,
      retryAfterMs: Number.POSITIVE_INFINITY,
    });

    clock.advance(TO_MINUTE_END - 1_000);
    expect(limiter.admit("sk-a", { tokens: 1_000 })).toMatchObject({
      allowed: true,
      state: { tokens: { remaining: 0, resetMs: 60_000 }, requests: { remaining: 1 } },
    });
  });

  it("refuses in sliding mode until enough of what the key spent has expired", () => {
    const clock = manualClock();
    const limiter = new RateLimiter(
      { rpm: 100, tpm: 1_000 },
      { "sk-a": { mode: "sliding", windowMs: 10_000 } },
      clock.now,
    );
    limiter.admit("sk-a", { tokens: 400 });
    clock.advance(2_000);
    limiter.admit("sk-a", { tokens: 500 });
    clock.advance(1_000);

    const refused = limiter.admit("sk-a", { tokens: 500 });
    expect(refused).toMatchObject({ allowed: false, kind: "tokens", used: 900, retryAfterMs: 7_000 });
    clock.advance(6_999);
    expect(limiter.admit("sk-a", { tokens: 500 }).allowed).toBe(false);
    clock.advance(1);
    expect(limiter.admit("sk-a", { tokens: 500 })).toMatchObject({
      allowed: true,
      state: { tokens: { remaining: 0, resetMs: 10_000 } },
    });
  });

  it("refuses a mode it does not know", () => {
    const limits = { rpm: 1, tpm: 1, mode: "leaky" } as unknown as { rpm: number; tpm: number };
    expect(() => new RateLimiter(limits, {}, Date.now).state("sk-a")).toThrow(/window mode .*'leaky'/);
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
