import { describe, expect, it } from "vitest";
import type { WindowReading } from "./headers.js";
import { ShapeTracker } from "./shape.js";

// Three providers' windows of 1,200 tokens a minute, read as their headers say: what is
// left, and when the window is whole again.
const LIMIT = 1_200;
const MINUTE = 60_000;

/** A token bucket: refills evenly, whole again when its deficit has refilled. */
function bucket() {
  let level = LIMIT;
  let at = 0;
  const perMs = LIMIT / MINUTE;
  const refill = (now: number) => {
    level = Math.min(LIMIT, level + (now - at) * perMs);
    at = now;
  };
  return {
    take(now: number, cost: number): WindowReading {
      refill(now);
      level = Math.max(0, level - cost);
      return { limit: LIMIT, remaining: Math.floor(level), resetAtMs: now + (LIMIT - level) / perMs };
    },
  };
}

/** A fixed window: cleared at every whole minute. */
function fixed() {
  let used = 0;
  let period = 0;
  return {
    take(now: number, cost: number): WindowReading {
      const start = Math.floor(now / MINUTE) * MINUTE;
      if (start !== period) {
        period = start;
        used = 0;
      }
      used = Math.min(LIMIT, used + cost);
      return { limit: LIMIT, remaining: LIMIT - used, resetAtMs: start + MINUTE };
    },
  };
}

/** A sliding log: what was spent a minute ago comes back; whole again a minute after the last call. */
function sliding() {
  const log: { at: number; cost: number }[] = [];
  return {
    take(now: number, cost: number): WindowReading {
      while (log.length > 0 && log[0]!.at + MINUTE <= now) log.shift();
      log.push({ at: now, cost });
      const used = log.reduce((sum, e) => sum + e.cost, 0);
      return { limit: LIMIT, remaining: Math.max(0, LIMIT - used), resetAtMs: now + MINUTE };
    },
  };
}

// Resets written to the millisecond, as OpenAI's durations are.
function track(window: { take(now: number, cost: number): WindowReading }, calls: [number, number][]) {
  const tracker = new ShapeTracker();
  for (const [now, cost] of calls) tracker.observe(window.take(now, cost), now, 1);
  return tracker.view();
}

// Calls of 100 tokens every 2.5 s from 1 s past a minute: a steady agent.
const steady: [number, number][] = Array.from({ length: 16 }, (_, i) => [61_000 + i * 2_500, 100]);
// A burst of 8 calls within 100 ms, then single calls 5 s apart.
const bursty: [number, number][] = [
  ...Array.from({ length: 8 }, (_, i): [number, number] => [61_000 + i * 10, 120]),
  ...Array.from({ length: 6 }, (_, i): [number, number] => [66_000 + i * 5_000, 20]),
];

describe("a window's shape, from its readings", () => {
  it("is unknown from one reading, and from readings too close together to tell", () => {
    expect(track(bucket(), [[61_000, 100]]).shape).toBe("unknown");
    // Nothing taken between them and 40 ms apart: a token bucket would have refilled less
    // than a token, so neither shape is told from the other.
    const close = new ShapeTracker();
    for (const at of [61_000, 61_020, 61_040]) {
      close.observe({ limit: LIMIT, remaining: 600, resetAtMs: 120_000 }, at);
    }
    expect(close.view()).toMatchObject({ shape: "unknown", readings: 3, evidence: 0 });
  });

  it("reads a token bucket as continuous, steady or bursty", () => {
    expect(track(bucket(), steady)).toMatchObject({ shape: "continuous", readings: 16 });
    expect(track(bucket(), bursty).shape).toBe("continuous");
  });

  it("reads a token bucket whose resets are whole seconds (Anthropic's) as continuous", () => {
    const tracker = new ShapeTracker();
    const b = bucket();
    for (const [now, cost] of steady) {
      const read = b.take(now, cost);
      tracker.observe({ ...read, resetAtMs: Math.ceil(read.resetAtMs! / 1_000) * 1_000 }, now);
    }
    expect(tracker.shape).toBe("continuous");
  });

  it("reads a window cleared every minute as fixed, and learns its period", () => {
    const view = track(fixed(), [...steady, [125_000, 100], [130_000, 100]]);
    expect(view.shape).toBe("fixed");
    expect(view.periodMs).toBe(MINUTE);
    expect(track(fixed(), bursty).shape).toBe("fixed");
  });

  it("reads a sliding log as sliding, steady or bursty, and how long a call counts in it", () => {
    // 50 tokens a call: a log the provider admits all of (one at 0 left reads as a full bucket).
    const light = steady.map(([now]): [number, number] => [now, 50]);
    expect(track(sliding(), light)).toMatchObject({ shape: "sliding", periodMs: MINUTE });
    expect(track(sliding(), bursty)).toMatchObject({ shape: "sliding", periodMs: MINUTE });
    // Resets written as whole seconds, and answers read 0–300 ms after their calls were sent:
    // still a sliding log, and a call counts for no more than a window and a second.
    const tracker = new ShapeTracker();
    const log = sliding();
    for (const [i, [now, cost]] of light.entries()) {
      const read = log.take(now, cost);
      const resetAtMs = Math.ceil(read.resetAtMs! / 1_000) * 1_000;
      tracker.observe({ ...read, resetAtMs }, now + (i % 4) * 100, 1_000, now);
    }
    expect(tracker.shape).toBe("sliding");
    // Answers read 100–900 ms after their calls were sent (long answers): the reset is a
    // window after a time between the two, which is what tells it.
    const slow = new ShapeTracker();
    const slowLog = sliding();
    for (const [i, [now, cost]] of light.entries()) {
      slow.observe(slowLog.take(now, cost), now + 100 + (i % 5) * 200, 1, now);
    }
    expect(slow.shape).toBe("sliding");
    expect(tracker.view().periodMs).toBeGreaterThanOrEqual(MINUTE);
    expect(tracker.view().periodMs).toBeLessThanOrEqual(MINUTE + 1_000);
  });

  it("reads a sliding log of a short window spent in one burst as sliding, not fixed", () => {
    // 10,000 tokens a second; 50 calls of 150 sent 6 ms apart, each answered 20 ms later.
    const log: { at: number; cost: number }[] = [];
    const tracker = new ShapeTracker();
    for (let i = 0; i < 50; i++) {
      const now = 500_000 + i * 6;
      while (log.length > 0 && log[0]!.at + 1_000 <= now) log.shift();
      log.push({ at: now, cost: 150 });
      const used = log.reduce((sum, e) => sum + e.cost, 0);
      tracker.observe({ limit: 10_000, remaining: 10_000 - used, resetAtMs: now + 1_000 }, now + 20, 1, now);
    }
    expect(tracker.shape).toBe("sliding");
  });

  it("does not read a token bucket whose answers are read seconds after their calls as a sliding log", () => {
    // Anthropic's shape: resets as whole-second timestamps, written when the call is taken,
    // and read when its answer ends, 0.3–2 s or 2–20 s later. Eight agents, each calling
    // again once its answer is in; the gateway takes in the readings in the order read.
    for (const [fromMs, toMs] of [
      [300, 2_000],
      [2_000, 20_000],
    ] as const) {
      for (let seed = 1; seed <= 5; seed++) {
        let state = seed * 7_919;
        const random = () => {
          state = (state * 48_271) % 2_147_483_647;
          return state / 2_147_483_647;
        };
        // 80,000 tokens a minute, calls of 150 to 450: about what it refills, so what is left
        // goes up and down; a call it cannot take is refused (and read as a refusal).
        const limit = 80_000;
        const perMs = limit / MINUTE;
        let level = limit;
        let at = 0;
        const answers: { sentMs: number; readMs: number; read: WindowReading; refused: boolean }[] = [];
        const next = Array.from({ length: 8 }, (_, i) => 61_000 + i * 137);
        for (let call = 0; call < 400; call++) {
          const agent = call % 8;
          const sentMs = next[agent]!;
          const takenMs = sentMs + 5 + random() * 40;
          level = Math.min(limit, level + (takenMs - at) * perMs);
          at = takenMs;
          const cost = 150 + random() * 300;
          const refused = cost > level;
          if (!refused) level -= cost;
          const resetAtMs = Math.ceil((takenMs + (limit - level) / perMs) / 1_000) * 1_000;
          const readMs = refused ? takenMs + 20 : sentMs + fromMs + random() * (toMs - fromMs);
          answers.push({ sentMs, readMs, refused, read: { limit, remaining: Math.floor(level), resetAtMs } });
          next[agent] = readMs + 50;
        }
        const tracker = new ShapeTracker();
        let newest = Number.NEGATIVE_INFINITY;
        let readAsSliding = 0;
        for (const { sentMs, readMs, read, refused } of answers.sort((x, y) => x.readMs - y.readMs)) {
          // An answer to an older call than the last reading's is not taken in (as KeyWindow does).
          if (sentMs < newest) continue;
          newest = sentMs;
          tracker.observe(read, readMs, 1_000, refused ? undefined : sentMs);
          // Not for a moment: the budget service would act on it at once.
          if (tracker.shape === "sliding") readAsSliding += 1;
        }
        expect(readAsSliding).toBe(0);
      }
    }
  });

  it("does not read a token bucket or a fixed window as a sliding log", () => {
    for (const calls of [steady, bursty]) {
      expect(track(bucket(), calls).shape).not.toBe("sliding");
      expect(track(fixed(), calls).shape).not.toBe("sliding");
    }
    // A bucket held level by steady calls moves its reset on as time does too: continuous.
    const tracker = new ShapeTracker();
    for (let i = 0; i < 8; i++) {
      const now = 61_000 + i * 2_500;
      tracker.observe({ limit: LIMIT, remaining: 1_100, resetAtMs: now + 5_000 }, now, 1);
    }
    expect(tracker.shape).toBe("continuous");
  });

  it("needs a clear majority to call a window continuous, and one vote to call it fixed", () => {
    const tracker = new ShapeTracker();
    const b = bucket();
    for (const [now, cost] of steady.slice(0, 3)) tracker.observe(b.take(now, cost), now, 1);
    expect(tracker.shape).toBe("continuous");
    // The same key then reads flat with an unmoved reset for 5 s: one vote the other way.
    tracker.observe({ limit: LIMIT, remaining: 500, resetAtMs: 200_000 }, 80_000);
    tracker.observe({ limit: LIMIT, remaining: 400, resetAtMs: 200_000 }, 85_000);
    expect(tracker.shape).toBe("fixed");
  });

  it("ignores readings with no limit or no reset, and readings older than the last", () => {
    const tracker = new ShapeTracker();
    tracker.observe({ limit: undefined, remaining: 10, resetAtMs: 70_000 }, 61_000);
    tracker.observe({ limit: LIMIT, remaining: 10, resetAtMs: undefined }, 62_000);
    expect(tracker.view()).toMatchObject({ shape: "unknown", readings: 2, evidence: 0 });
    const f = fixed();
    tracker.observe(f.take(63_000, 100), 63_000);
    tracker.observe(f.take(62_000, 100), 62_000);
    expect(tracker.view().evidence).toBe(0);
  });

  it("tells the shape within one burst of calls when resets are written to the millisecond", () => {
    // A window of 4,000 tokens a second; twenty calls of 80 tokens 10 ms apart.
    const burst = (window: (now: number, cost: number) => WindowReading) => {
      const tracker = new ShapeTracker();
      for (let i = 0; i < 20; i++) tracker.observe(window(500_100 + i * 10, 80), 500_100 + i * 10, 1);
      return tracker.shape;
    };
    let used = 0;
    const fixedSecond = (now: number, cost: number): WindowReading => {
      used += cost;
      return { limit: 4_000, remaining: 4_000 - used, resetAtMs: Math.ceil(now / 1_000) * 1_000 };
    };
    let level = 2_000;
    let at = 500_100;
    const bucketSecond = (now: number, cost: number): WindowReading => {
      level = Math.min(4_000, level + (now - at) * 4) - cost;
      at = now;
      return { limit: 4_000, remaining: Math.floor(level), resetAtMs: now + (4_000 - level) / 4 };
    };
    expect(burst(fixedSecond)).toBe("fixed");
    expect(burst(bucketSecond)).toBe("continuous");
  });
});
