import { describe, expect, it } from "vitest";
import { ANTHROPIC_HEADERS, OPENAI_HEADERS, parseDuration, readRateLimits } from "./headers.js";
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

describe("a window as time passes", () => {
  const window = WindowState.from({ limit: 1_000, remaining: 200, resetAtMs: NOW + 8_000 }, NOW);

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
