import { describe, expect, it } from "vitest";
import {
  ANTHROPIC_HEADERS,
  MAX_WINDOW_COUNT,
  MAX_WINDOW_WAIT_MS,
  OPENAI_HEADERS,
  parseDuration,
  type RateLimitReading,
  readRateLimits,
} from "./headers.js";
import { WindowState } from "./window.js";

const NOW = Date.parse("2026-12-03T12:00:00Z");

describe("rate-limit headers", () => {
  it("reads OpenAI's and Groq's windows, resets written as Go durations", () => {
    const reading = readRateLimits(
      {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-limit-tokens": "150000",
        "x-ratelimit-remaining-tokens": "149984",
        "x-ratelimit-reset-tokens": "6m0s",
      },
      OPENAI_HEADERS,
      NOW,
    );
    expect(reading).toEqual({
      requests: { limit: 60, remaining: 59, resetAtMs: NOW + 1_000 },
      tokens: { limit: 150_000, remaining: 149_984, resetAtMs: NOW + 360_000 },
    });
  });

  it("parses every reset spelling providers use", () => {
    expect(parseDuration("7.66s")).toBeCloseTo(7_660);
    expect(parseDuration("120ms")).toBe(120);
    expect(parseDuration("2m59.56s")).toBeCloseTo(179_560);
    expect(parseDuration("1h2m3s")).toBe(3_723_000);
    expect(parseDuration("30")).toBe(30_000);
    expect(parseDuration("soon")).toBeUndefined();
    expect(parseDuration("")).toBeUndefined();
  });

  it("reads Anthropic's four windows, resets as RFC 3339 timestamps, and retry-after", () => {
    const reading = readRateLimits(
      {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-12-03T12:00:30Z",
        "anthropic-ratelimit-input-tokens-limit": "40000",
        "anthropic-ratelimit-input-tokens-remaining": "12000",
        "anthropic-ratelimit-input-tokens-reset": "2026-12-03T12:00:45Z",
        "anthropic-ratelimit-output-tokens-remaining": "8000",
        "retry-after": "30",
      },
      ANTHROPIC_HEADERS,
      NOW,
    );
    expect(reading).toEqual({
      requests: { limit: 50, remaining: 0, resetAtMs: NOW + 30_000 },
      inputTokens: { limit: 40_000, remaining: 12_000, resetAtMs: NOW + 45_000 },
      outputTokens: { limit: undefined, remaining: 8_000, resetAtMs: undefined },
      retryAfterMs: 30_000,
    });
  });

  it("leaves out what does not parse, and says nothing for a response without them", () => {
    expect(readRateLimits({ "content-type": "application/json" }, OPENAI_HEADERS, NOW)).toBeUndefined();
    expect(
      readRateLimits(
        {
          "x-ratelimit-remaining-tokens": "lots",
          "x-ratelimit-remaining-requests": "3",
          "x-ratelimit-reset-requests": "?",
        },
        OPENAI_HEADERS,
        NOW,
      ),
    ).toEqual({ requests: { limit: undefined, remaining: 3, resetAtMs: undefined } });
    expect(readRateLimits({ "retry-after": "Thu, 03 Dec 2026 12:00:10 GMT" }, OPENAI_HEADERS, NOW)).toEqual({
      retryAfterMs: 10_000,
    });
    expect(readRateLimits({ "retry-after-ms": "250", "retry-after": "1" }, OPENAI_HEADERS, NOW)).toEqual({
      retryAfterMs: 250,
    });
  });
});

/** The reading of `headers` and what was said to be wrong with them. */
function read(headers: Record<string, string>, names = OPENAI_HEADERS) {
  const problems: string[] = [];
  const reading = readRateLimits(headers, names, NOW, (problem) => problems.push(problem));
  return { reading, problems };
}

describe("rate-limit headers past their bounds", () => {
  it.each([
    ["2^64", "18446744073709551616"],
    ["2^53 + 1", "9007199254740993"],
    ["1e30", "1e30"],
    ["-5", "-5"],
    ["NaN", "NaN"],
    ["Infinity", "Infinity"],
    ["hexadecimal", "0x10"],
    ["a count past 10^12", String(MAX_WINDOW_COUNT + 1)],
    ["four hundred digits", "9".repeat(400)],
  ])(
    "a remaining of %s is not believed: the dimension is not reported, and the header is named",
    (_, value) => {
      const { reading, problems } = read({
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": value,
        "x-ratelimit-remaining-requests": "3",
      });
      expect(reading).toEqual({ requests: { limit: undefined, remaining: 3, resetAtMs: undefined } });
      expect(problems).toHaveLength(1);
      expect(problems[0]).toContain("x-ratelimit-remaining-tokens");
    },
  );

  it("a limit past its bound is left out, the remaining kept", () => {
    const { reading, problems } = read({
      "x-ratelimit-limit-tokens": "18446744073709551616",
      "x-ratelimit-remaining-tokens": "500",
    });
    expect(reading).toEqual({ tokens: { limit: undefined, remaining: 500, resetAtMs: undefined } });
    expect(problems[0]).toMatch(/x-ratelimit-limit-tokens "18446744073709551616" is more than 1000000000000/);
  });

  it("takes a remaining above the limit as the limit, and says so", () => {
    const { reading, problems } = read({
      "x-ratelimit-limit-tokens": "1000",
      "x-ratelimit-remaining-tokens": "900000000000",
    });
    expect(reading?.tokens).toEqual({ limit: 1_000, remaining: 1_000, resetAtMs: undefined });
    expect(problems).toEqual([
      "x-ratelimit-remaining-tokens 900000000000 is more than x-ratelimit-limit-tokens 1000: taken as 1000",
    ]);
  });

  it("reads the bounds themselves, and a fraction rounded down", () => {
    const { reading, problems } = read({
      "x-ratelimit-limit-tokens": String(MAX_WINDOW_COUNT),
      "x-ratelimit-remaining-tokens": "12.9",
      "x-ratelimit-reset-tokens": `${MAX_WINDOW_WAIT_MS}ms`,
      "retry-after-ms": String(MAX_WINDOW_WAIT_MS),
    });
    expect(reading).toEqual({
      tokens: { limit: MAX_WINDOW_COUNT, remaining: 12, resetAtMs: NOW + MAX_WINDOW_WAIT_MS },
      retryAfterMs: MAX_WINDOW_WAIT_MS,
    });
    expect(problems).toEqual([]);
  });

  it.each([
    ["10^20 s", "100000000000000000000s"],
    ["a century", "876000h"],
    ["31 days and a millisecond", `${MAX_WINDOW_WAIT_MS + 1}ms`],
    ["negative", "-1s"],
    ["not a duration", "soon"],
  ])("a reset %s away is left out, the rest of the dimension kept", (_, value) => {
    const { reading, problems } = read({
      "x-ratelimit-limit-tokens": "1000",
      "x-ratelimit-remaining-tokens": "0",
      "x-ratelimit-reset-tokens": value,
    });
    expect(reading).toEqual({ tokens: { limit: 1_000, remaining: 0, resetAtMs: undefined } });
    expect(problems[0]).toContain("x-ratelimit-reset-tokens");
  });

  it.each([
    ["the year 9999", "9999-12-31T23:59:59Z"],
    ["the year 1970", "1970-01-01T00:00:00Z"],
    ["past what a Date holds", "275760-09-14T00:00:00Z"],
  ])("an Anthropic reset in %s is left out", (_, value) => {
    const { reading, problems } = read(
      {
        "anthropic-ratelimit-input-tokens-limit": "40000",
        "anthropic-ratelimit-input-tokens-remaining": "0",
        "anthropic-ratelimit-input-tokens-reset": value,
      },
      ANTHROPIC_HEADERS,
    );
    expect(reading).toEqual({ inputTokens: { limit: 40_000, remaining: 0, resetAtMs: undefined } });
    expect(problems[0]).toContain("anthropic-ratelimit-input-tokens-reset");
  });

  it.each([
    ["retry-after", "99999999999"],
    ["retry-after", "1e30"],
    ["retry-after", "-5"],
    ["retry-after", "NaN"],
    ["retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"],
    ["retry-after-ms", "18446744073709551616"],
    ["retry-after-ms", String(MAX_WINDOW_WAIT_MS + 1)],
    ["retry-after-ms", "-1"],
  ])("%s: %s is not a cooldown", (name, value) => {
    const { reading, problems } = read({ [name]: value });
    expect(reading).toBeUndefined();
    expect(problems[0]).toContain(name);
  });

  it("falls back to retry-after when retry-after-ms cannot be used", () => {
    const { reading, problems } = read({ "retry-after-ms": "NaN", "retry-after": "2" });
    expect(reading).toEqual({ retryAfterMs: 2_000 });
    expect(problems).toEqual(['retry-after-ms "NaN" is not a number of milliseconds']);
  });

  it("says everything wrong with one answer once, bounded, with the values quoted", () => {
    const { problems } = read({
      "x-ratelimit-limit-requests": "x".repeat(10_000),
      "x-ratelimit-remaining-requests": "1\u0000e30",
      "x-ratelimit-remaining-tokens": "-1",
      "x-ratelimit-reset-tokens": "9".repeat(500),
      "retry-after": "never",
    });
    expect(problems).toHaveLength(1);
    expect(problems[0]!.length).toBeLessThan(1_000);
    expect(problems[0]).toContain('"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…"');
    expect(problems[0]).toContain('"1\\u0000e30"');
  });

  it("whatever the headers say, every figure of a reading is a whole number within its bound", () => {
    const values = [
      "18446744073709551616",
      "1e30",
      "-5",
      "NaN",
      "Infinity",
      "0x7fffffff",
      "1.5e3",
      " 42 ",
      "100000000000000000000s",
      "876000h",
      "9999-12-31T23:59:59Z",
      "0",
      "1",
      "60",
      "6m0s",
      "",
    ];
    const names = Object.values(OPENAI_HEADERS.dimensions).flatMap((d) => [d.limit, d.remaining, d.reset]);
    for (const value of values) {
      for (const other of values) {
        const headers = Object.fromEntries(names.map((name, i) => [name, i % 2 === 0 ? value : other]));
        const reading: RateLimitReading | undefined = readRateLimits(
          { ...headers, "retry-after": other, "retry-after-ms": value },
          OPENAI_HEADERS,
          NOW,
        );
        for (const window of [reading?.requests, reading?.tokens]) {
          if (window === undefined) continue;
          expect(Number.isSafeInteger(window.remaining) && window.remaining >= 0).toBe(true);
          expect(window.remaining).toBeLessThanOrEqual(window.limit ?? MAX_WINDOW_COUNT);
          if (window.limit !== undefined) expect(Number.isSafeInteger(window.limit)).toBe(true);
          if (window.limit !== undefined) expect(window.limit).toBeLessThanOrEqual(MAX_WINDOW_COUNT);
          if (window.resetAtMs !== undefined) {
            expect(Math.abs(window.resetAtMs - NOW)).toBeLessThanOrEqual(MAX_WINDOW_WAIT_MS);
          }
        }
        if (reading?.retryAfterMs !== undefined) {
          expect(reading.retryAfterMs >= 0 && reading.retryAfterMs <= MAX_WINDOW_WAIT_MS).toBe(true);
        }
      }
    }
  });
});

describe("a window as time passes", () => {
  const window = WindowState.from(
    { limit: 1_000, remaining: 200, resetAtMs: NOW + 8_000 },
    NOW,
    "continuous",
  );

  it("refills evenly to the whole window by its reset", () => {
    expect(window.available(NOW)).toBe(200);
    expect(window.available(NOW + 4_000)).toBe(600);
    expect(window.available(NOW + 8_000)).toBe(1_000);
    expect(window.available(NOW + 60_000)).toBe(1_000);
  });

  it("says when an amount will be there, and never for more than the window", () => {
    expect(window.availableAt(100, NOW)).toBe(NOW);
    expect(window.availableAt(600, NOW)).toBe(NOW + 4_000);
    expect(window.availableAt(1_000, NOW)).toBe(NOW + 8_000);
    expect(window.availableAt(1_001, NOW)).toBeUndefined();
    const unknown = WindowState.from({ limit: undefined, remaining: 5, resetAtMs: undefined }, NOW);
    expect(unknown.available(NOW + 1_000)).toBe(5);
    expect(unknown.availableAt(6, NOW)).toBeUndefined();
  });
});

describe("a window that does not refill as it goes", () => {
  const read = { limit: 1_000, remaining: 200, resetAtMs: NOW + 8_000 };

  it("gives nothing back before its reset, and all of it at the reset, fixed or not yet known", () => {
    for (const shape of ["fixed", "irregular", "unknown"] as const) {
      const window = WindowState.from(read, NOW, shape);
      expect(window.available(NOW + 7_999)).toBe(200);
      expect(window.available(NOW + 8_000)).toBe(1_000);
      expect(window.availableAt(100, NOW)).toBe(NOW);
      expect(window.availableAt(201, NOW)).toBe(NOW + 8_000);
      expect(window.availableAt(1_001, NOW)).toBeUndefined();
    }
  });

  it("takes one period for every further window's worth (the reading's time to its reset, before one was seen)", () => {
    const window = WindowState.from(read, NOW, "fixed", 60_000);
    // 1,200 beyond what is left: the reset's whole window, and one more window a minute on.
    expect(window.refilledAt(1_400, NOW, 30_000)).toBe(NOW + 8_000 + 60_000);
    // Before a period was seen: as long as the reading had to its reset, 8 s.
    expect(WindowState.from(read, NOW, "fixed").refilledAt(1_400, NOW, 30_000)).toBe(NOW + 8_000 + 8_000);
    expect(window.refilledAt(1_200, NOW, 30_000)).toBe(NOW + 8_000);
  });
});
