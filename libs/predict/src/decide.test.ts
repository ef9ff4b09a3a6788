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
  // Two earlier answers, half the window left at each, showed it refills evenly.
  for (const before of [20_000, 10_000]) {
    const at = NOW - before;
    window.observe(
      {
        tokens: { limit: 6_000, remaining: 3_000, resetAtMs: at + 30_000 },
        requests: { limit: 30, remaining: 15, resetAtMs: at + 30_000 },
      },
      at,
      at,
      1,
    );
  }
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

  it("records the first reading of a new window, however little it moved, unless the key refills as it goes", () => {
    const window = new KeyWindow("k1", "https://api.example");
    const read = (remaining: number, at: number, resetAtMs: number) =>
      window.observe({ tokens: { limit: 6_000, remaining, resetAtMs } }, at, at);
    expect(read(5_000, NOW, NOW + 2_000)).toBe(true);
    // Past the recorded reading's reset: the other gateways' account of the key knows
    // nothing of the window now, whatever came back; this reading is the first word of it.
    expect(read(5_000, NOW + 3_000, NOW + 5_000)).toBe(true);
    expect(read(4_950, NOW + 3_050, NOW + 5_000)).toBe(false);
    // A reset a few ms off (a bucket nearly full, as OpenAI writes it) is no window's end.
    const nearlyFull = new KeyWindow("k3", "https://api.example");
    const readFull = (at: number) =>
      nearlyFull.observe({ tokens: { limit: 6_000, remaining: 5_990, resetAtMs: at + 6 } }, at, at);
    expect(readFull(NOW)).toBe(true);
    expect(readFull(NOW + 1_000)).toBe(false);
    // A key read as refilling evenly needs no word at its reset: the account refills it.
    const even = new KeyWindow("k2", "https://api.example", "continuous");
    const readEven = (remaining: number, at: number, resetAtMs: number) =>
      even.observe({ tokens: { limit: 6_000, remaining, resetAtMs } }, at, at);
    expect(readEven(5_000, NOW, NOW + 100)).toBe(true);
    expect(readEven(5_000, NOW + 1_000, NOW + 1_100)).toBe(false);
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

describe("decide, by the window's shape", () => {
  // A window of 6,000 tokens a minute with 1,000 left, whole again in 30 s.
  const reading = { tokens: { limit: 6_000, remaining: 1_000, resetAtMs: NOW + 30_000 } };

  it("waits for the reset of a window whose shape is not known yet, never on a guessed refill", () => {
    const window = new KeyWindow("k1", "https://api.example");
    window.observe(reading, NOW, NOW, 1);
    expect(window.shapeOf("tokens")).toMatchObject({ shape: "unknown", readings: 1 });
    const decision = decide({ window, need: need(2_000), nowMs: NOW, waitThresholdMs: 60_000 });
    expect(decision).toMatchObject({ action: "wait", untilMs: NOW + 30_000 + 50 });
  });

  it("waits for the reset of a fixed window, then spends the whole of it", () => {
    const window = new KeyWindow("k1", "https://api.example");
    // Three answers 5 s apart: what is left only falls, and the reset does not move.
    for (const [after, left] of [
      [-10_000, 3_000],
      [-5_000, 2_000],
      [0, 1_000],
    ] as const) {
      window.observe(
        { tokens: { limit: 6_000, remaining: left, resetAtMs: NOW + 30_000 } },
        NOW + after,
        NOW + after,
        1,
      );
    }
    expect(window.shapeOf("tokens")?.shape).toBe("fixed");
    expect(decide({ window, need: need(2_000), nowMs: NOW + 20_000, waitThresholdMs: 60_000 })).toMatchObject(
      {
        action: "wait",
        untilMs: NOW + 30_050,
      },
    );
    // At the reset: six calls of 1,000 go, the seventh waits for the next window.
    const at = NOW + 30_050;
    for (let i = 0; i < 6; i++) {
      expect(decide({ window, need: need(1_000, 0), nowMs: at, waitThresholdMs: 600_000 }).action).toBe(
        "continue",
      );
      window.reserve({}, need(1_000, 0), at);
    }
    expect(decide({ window, need: need(1_000, 0), nowMs: at, waitThresholdMs: 600_000 }).action).toBe("wait");
  });

  it("takes a reset hours away as a day's budget: a call that does not fit is checkpointed, not waited a minute for", () => {
    const window = new KeyWindow("k1", "https://api.example");
    // Groq's requests per day: 14,400, none left, whole again in 6 hours.
    window.observe(
      { requests: { limit: 14_400, remaining: 0, resetAtMs: NOW + 6 * 3_600_000 } },
      NOW,
      NOW,
      1,
    );
    const decision = decide({ window, need: need(0, 1), nowMs: NOW, waitThresholdMs: 15_000 });
    expect(decision).toMatchObject({ action: "checkpoint", why: "threshold" });
    if (decision.action === "checkpoint")
      expect(decision.untilMs).toBeGreaterThanOrEqual(NOW + 6 * 3_600_000);
  });

  it("acts on the shape another gateway learnt, and records a reading that changed its own", () => {
    const window = new KeyWindow("k1", "https://api.example");
    window.learn(reading, NOW, NOW, { tokens: "continuous" });
    // 5,000 missing, whole in 30 s: 1,000 more comes back in 6 s.
    const decision = decide({ window, need: need(2_000, 0), nowMs: NOW, waitThresholdMs: 60_000 });
    expect(decision.action).toBe("wait");
    if (decision.action === "wait") expect(decision.untilMs).toBeLessThan(NOW + 7_000);

    const own = new KeyWindow("k2", "https://api.example");
    const read = (after: number, left: number) =>
      own.observe(
        { tokens: { limit: 6_000, remaining: left, resetAtMs: NOW + 30_000 } },
        NOW + after,
        NOW + after,
        1,
      );
    expect(read(0, 3_000)).toBe(true);
    // Moved by less than a tenth, but it showed the window is fixed: worth recording.
    expect(read(5_000, 2_900)).toBe(true);
    expect(own.shapeOf("tokens")).toMatchObject({ shape: "fixed", readings: 2, declared: false });
  });

  it("takes the shape an operator gave over what the readings show", () => {
    const window = new KeyWindow("k1", "https://api.example", "continuous");
    window.observe(reading, NOW, NOW, 1);
    expect(window.shapeOf("tokens")).toMatchObject({ shape: "continuous", declared: true });
    expect(decide({ window, need: need(2_000, 0), nowMs: NOW, waitThresholdMs: 60_000 }).action).toBe("wait");
    expect(window.view("tokens", NOW + 6_000)?.remaining).toBeCloseTo(2_000, 0);
  });
});
