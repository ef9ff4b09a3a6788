import { describe, expect, it } from "vitest";
import { decide } from "./decide.js";
import { KeyWindow, type Need } from "./keys.js";

const NOW = Date.parse("2026-12-03T12:00:00Z");
const THRESHOLD = 15_000;

const need = (tokens: number, requests = 1): Need => ({ requests, tokens, inputTokens: 0, outputTokens: 0 });

/**
 * A key whose last answer (to a call started at NOW) left `tokens` of 6,000 a minute and
 * `requests` of 30, each refilling evenly (100 tokens a second) to full by its reset.
 */
function keyWith(tokens: number, requests = 30): KeyWindow {
  const window = new KeyWindow("k1", "https://api.example");
  window.observe(
    {
      tokens: { limit: 6_000, remaining: tokens, resetAtMs: NOW + (6_000 - tokens) * 10 },
      requests: { limit: 30, remaining: requests, resetAtMs: NOW + (30 - requests) * 2_000 },
    },
    NOW,
    NOW,
  );
  return window;
}

describe("decide: continue, wait or checkpoint", () => {
  it("continues when nothing is known of the key yet", () => {
    expect(
      decide({ window: undefined, need: need(5_000), nowMs: NOW, waitThresholdMs: THRESHOLD }).action,
    ).toBe("continue");
  });

  it("continues when the window holds the estimate and its margin", () => {
    const decision = decide({
      window: keyWith(3_000),
      need: need(2_000),
      nowMs: NOW,
      waitThresholdMs: THRESHOLD,
    });
    expect(decision).toMatchObject({
      action: "continue",
      figures: { dimension: "tokens", remaining: 3_000, needed: 2_000, limit: 6_000 },
    });
  });

  it("waits in place until the window has refilled enough, when that is within the threshold", () => {
    // 100 tokens a second: 1,000 missing is 10 s.
    const decision = decide({
      window: keyWith(1_000),
      need: need(2_000),
      nowMs: NOW,
      waitThresholdMs: THRESHOLD,
    });
    expect(decision.action).toBe("wait");
    if (decision.action !== "wait") return;
    expect(decision.untilMs - NOW).toBeGreaterThanOrEqual(10_000);
    expect(decision.untilMs - NOW).toBeLessThan(10_200);
    expect(decision.figures).toMatchObject({ dimension: "tokens", remaining: 1_000, needed: 2_000 });
  });

  it("checkpoints when the wait is longer than the threshold, or runs past the deadline", () => {
    const long = decide({ window: keyWith(0), need: need(3_000), nowMs: NOW, waitThresholdMs: THRESHOLD });
    expect(long).toMatchObject({ action: "checkpoint", why: "threshold" });
    const late = decide({
      window: keyWith(1_000),
      need: need(2_000),
      nowMs: NOW,
      waitThresholdMs: THRESHOLD,
      deadlineMs: NOW + 5_000,
    });
    expect(late).toMatchObject({ action: "checkpoint", why: "deadline" });
  });

  it("blocks on exhausted requests even with tokens to spare", () => {
    const decision = decide({
      window: keyWith(6_000, 0),
      need: need(100),
      nowMs: NOW,
      waitThresholdMs: THRESHOLD,
    });
    expect(decision).toMatchObject({ action: "wait", figures: { dimension: "requests", remaining: 0 } });
  });

  it("cuts a margin larger than the window to the window: only what the call takes for certain makes it too large", () => {
    const decision = decide({
      window: keyWith(6_000),
      need: need(7_000),
      floor: need(5_000),
      nowMs: NOW,
      waitThresholdMs: THRESHOLD,
    });
    expect(decision).toMatchObject({ action: "continue", figures: { needed: 6_000 } });
  });

  it("answers at once that a call larger than the whole window can never go", () => {
    const decision = decide({
      window: keyWith(6_000),
      need: need(7_000),
      nowMs: NOW,
      waitThresholdMs: THRESHOLD,
    });
    expect(decision).toMatchObject({ action: "too_large", figures: { limit: 6_000, needed: 7_000 } });
  });

  it("counts what calls in flight since the reading reserved, and forgets it when they answer", () => {
    const window = keyWith(3_000);
    const first = {};
    window.reserve(first, need(2_000), NOW + 1);
    expect(decide({ window, need: need(2_000), nowMs: NOW + 1, waitThresholdMs: THRESHOLD }).action).toBe(
      "wait",
    );
    window.release(first);
    expect(decide({ window, need: need(2_000), nowMs: NOW + 1, waitThresholdMs: THRESHOLD }).action).toBe(
      "continue",
    );
  });

  it("makes a call wait while calls in flight hold the whole window, past the reading's reset too", () => {
    // Read at NOW: 5,500 of 6,000 left, whole again 5 s on (100 tokens a second).
    const window = keyWith(5_500);
    // Six calls went out since, 1,000 reserved each: as much as the whole window holds.
    for (let i = 0; i < 6; i++) window.reserve({}, need(1_000), NOW + 1);
    // 10 s on, past that reset, they still take their 6,000 out of the window as it refills:
    // 1,000 more is there once 7,000 have refilled since the reading, 15 s after it.
    const decision = decide({ window, need: need(1_000), nowMs: NOW + 10_000, waitThresholdMs: THRESHOLD });
    expect(decision).toMatchObject({ action: "wait", figures: { remaining: 0, needed: 1_000 } });
    if (decision.action !== "wait") return;
    expect(decision.untilMs).toBeGreaterThanOrEqual(NOW + 15_000);
    expect(decision.untilMs).toBeLessThan(NOW + 15_200);
  });

  it("does not count twice a call the reading already shows", () => {
    const window = new KeyWindow("k1", "https://api.example");
    const early = {};
    window.reserve(early, need(2_000), NOW);
    // The answer to a call started after `early` already shows what `early` took.
    window.observe(
      { tokens: { limit: 6_000, remaining: 2_500, resetAtMs: NOW + 60_000 } },
      NOW + 5,
      NOW + 10,
    );
    expect(decide({ window, need: need(2_000), nowMs: NOW + 10, waitThresholdMs: THRESHOLD }).action).toBe(
      "continue",
    );
  });

  it("honours a cooldown a 429's retry-after asked for", () => {
    const window = keyWith(6_000);
    window.observe({ retryAfterMs: 3_000 }, NOW, NOW);
    const decision = decide({ window, need: need(100), nowMs: NOW, waitThresholdMs: THRESHOLD });
    expect(decision).toMatchObject({ action: "wait", untilMs: NOW + 3_000 });
    expect(decide({ window, need: need(100), nowMs: NOW + 3_001, waitThresholdMs: THRESHOLD }).action).toBe(
      "continue",
    );
  });

  it("refills: what waits now goes once the window has refilled", () => {
    const window = keyWith(1_000);
    const wait = decide({ window, need: need(2_000), nowMs: NOW, waitThresholdMs: THRESHOLD });
    expect(wait.action).toBe("wait");
    if (wait.action !== "wait") return;
    expect(
      decide({ window, need: need(2_000), nowMs: wait.untilMs, waitThresholdMs: THRESHOLD }).action,
    ).toBe("continue");
  });
});

describe("KeyWindow: which readings are worth an event", () => {
  it("records the first reading, a move of a tenth of the limit, and a cooldown; not every wiggle", () => {
    const window = new KeyWindow("k1", "https://api.example");
    const read = (remaining: number, at: number) =>
      window.observe({ tokens: { limit: 6_000, remaining, resetAtMs: at + 60_000 } }, at, at);
    expect(read(6_000, NOW)).toBe(true);
    expect(read(5_900, NOW + 1)).toBe(false);
    expect(read(5_300, NOW + 2)).toBe(true);
    expect(read(5_290, NOW + 3)).toBe(false);
    expect(read(5_280, NOW + 20_000)).toBe(true);
    // Under a fifth of the limit left, every move is worth it: other gateways need each one.
    expect(read(1_100, NOW + 20_001)).toBe(true);
    expect(read(1_090, NOW + 20_002)).toBe(true);
    expect(read(1_090, NOW + 20_003)).toBe(false);
    expect(window.observe({ retryAfterMs: 1_000 }, NOW + 20_001, NOW + 20_001)).toBe(true);
  });

  it("learns another gateway's newer reading, and ignores an older one", () => {
    const window = new KeyWindow("k1", "https://api.example");
    window.observe({ tokens: { limit: 6_000, remaining: 5_000, resetAtMs: NOW + 10_000 } }, NOW, NOW);
    window.learn({ tokens: { limit: 6_000, remaining: 1_000, resetAtMs: NOW + 50_000 } }, NOW + 5, NOW + 6);
    expect(window.view("tokens", NOW + 6)?.remaining).toBeLessThan(1_001);
    window.learn({ tokens: { limit: 6_000, remaining: 5_500, resetAtMs: NOW + 5_000 } }, NOW + 1, NOW + 7);
    expect(window.view("tokens", NOW + 7)?.remaining).toBeLessThan(1_002);
  });

  it("keeps the newer reading when an answer to an older call comes back later", () => {
    const window = new KeyWindow("k1", "https://api.example");
    window.observe(
      { tokens: { limit: 6_000, remaining: 1_000, resetAtMs: NOW + 60_000 } },
      NOW + 10,
      NOW + 10,
    );
    window.observe(
      { tokens: { limit: 6_000, remaining: 5_000, resetAtMs: NOW + 60_000 } },
      NOW + 5,
      NOW + 11,
    );
    expect(window.view("tokens", NOW + 11)?.remaining).toBeLessThan(1_100);
  });
});
