import { describe, expect, it } from "vitest";
import { ConcurrencyLimit, ConcurrencyLimits } from "./concurrency.js";

const NOW = Date.parse("2026-12-07T12:00:00Z");

/** A limit with `calls` holding a slot each (taken while it was unlimited); the calls. */
function holding(calls: number): { limit: ConcurrencyLimit; calls: object[] } {
  const limit = new ConcurrencyLimit();
  const held = Array.from({ length: calls }, () => ({}));
  for (const call of held) expect(limit.acquire(call)).toBe(true);
  return { limit, calls: held };
}

/** Whether the turn has come (resolved) by the time the microtasks queued now have run. */
async function came(turn: true | Promise<void>): Promise<boolean> {
  if (turn === true) return true;
  let done = false;
  void turn.then(() => {
    done = true;
  });
  await Promise.resolve();
  await Promise.resolve();
  return done;
}

describe("ConcurrencyLimit: calls at once on a key that reports no window", () => {
  it("is unlimited until the first 429: a key that never refused is never slowed, successes or not", () => {
    const { limit } = holding(500);
    expect(limit.limit).toBe(Number.POSITIVE_INFINITY);
    for (let i = 0; i < 100; i++) limit.succeeded();
    expect(limit.limit).toBe(Number.POSITIVE_INFINITY);
    expect(limit.acquire({})).toBe(true);
    expect(limit.inFlight).toBe(501);
  });

  it("on the first 429 becomes half of what was in flight then, rounded down", () => {
    const { limit } = holding(9);
    expect(limit.refused({ nowMs: NOW, sentAtMs: NOW - 500, retryAfterMs: 1_000 })).toBe(true);
    expect(limit.limit).toBe(4);
  });

  it("never goes below 1: one call in flight refused still leaves the key one call at once", () => {
    const { limit, calls } = holding(1);
    limit.refused({ nowMs: NOW, sentAtMs: NOW - 100 });
    expect(limit.limit).toBe(1);
    // Refused again in later periods, with the one call in flight each time.
    for (let i = 1; i <= 5; i++) {
      expect(limit.refused({ nowMs: NOW + i * 10_000, sentAtMs: NOW + i * 10_000 - 100 })).toBe(true);
      expect(limit.limit).toBe(1);
    }
    limit.release(calls[0]!);
    expect(limit.acquire({})).toBe(true);
  });

  it("decreases at most once per retry-after: the other 429s of one overshoot leave it be", () => {
    const { limit } = holding(8);
    expect(limit.refused({ nowMs: NOW, sentAtMs: NOW - 400, retryAfterMs: 2_000 })).toBe(true);
    expect(limit.limit).toBe(4);
    // The rest of the burst, sent at the same time, answered within the retry-after.
    for (let i = 1; i <= 7; i++) {
      expect(limit.refused({ nowMs: NOW + i * 10, sentAtMs: NOW - 400, retryAfterMs: 2_000 })).toBe(false);
    }
    // Sent after the decrease, but still within its period: the same overshoot.
    expect(limit.refused({ nowMs: NOW + 1_500, sentAtMs: NOW + 1_000, retryAfterMs: 2_000 })).toBe(false);
    expect(limit.limit).toBe(4);
    // Past the period, for a call sent under the lowered limit: a new overshoot.
    expect(limit.refused({ nowMs: NOW + 2_500, sentAtMs: NOW + 2_100, retryAfterMs: 2_000 })).toBe(true);
    expect(limit.limit).toBe(2); // 8 still hold slots: half of the limit (4), not of the 8
  });

  it("does not count a 429 for an attempt sent before the last decrease, however late it comes back", () => {
    const { limit } = holding(8);
    limit.refused({ nowMs: NOW, sentAtMs: NOW - 100 });
    expect(limit.refused({ nowMs: NOW + 60_000, sentAtMs: NOW - 50 })).toBe(false);
    expect(limit.limit).toBe(4);
  });

  it("waits a second between decreases when the 429 named no retry-after", () => {
    const { limit } = holding(16);
    limit.refused({ nowMs: NOW, sentAtMs: NOW - 10 });
    expect(limit.refused({ nowMs: NOW + 999, sentAtMs: NOW + 1 })).toBe(false);
    expect(limit.refused({ nowMs: NOW + 1_000, sentAtMs: NOW + 1 })).toBe(true);
    expect(limit.limit).toBe(4);
  });

  it("grows by 1/limit per success: one more call at once per window of successes", () => {
    const { limit } = holding(8);
    limit.refused({ nowMs: NOW, sentAtMs: NOW });
    expect(limit.limit).toBe(4);
    for (let i = 0; i < 3; i++) limit.succeeded();
    expect(limit.limit).toBe(4); // three of the four successes a window at 4 takes
    limit.succeeded();
    expect(limit.limit).toBe(5); // four successes at 4
    for (let i = 0; i < 4; i++) limit.succeeded();
    expect(limit.limit).toBe(5);
    limit.succeeded();
    expect(limit.limit).toBe(6); // five more at 5
  });

  it("does not grow while less than half of it is in use: those successes say nothing of more calls at once", () => {
    const { limit, calls } = holding(8);
    limit.refused({ nowMs: NOW, sentAtMs: NOW });
    for (const call of calls.slice(1)) limit.release(call);
    expect(limit.inFlight).toBe(1);
    for (let i = 0; i < 100; i++) limit.succeeded();
    expect(limit.limit).toBe(4);
  });

  it("stops growing at its maximum", () => {
    const limit = new ConcurrencyLimit({ max: 6 });
    const calls = Array.from({ length: 12 }, () => ({}));
    for (const call of calls) limit.acquire(call);
    limit.refused({ nowMs: NOW, sentAtMs: NOW });
    for (let i = 0; i < 1_000; i++) limit.succeeded();
    expect(limit.limit).toBe(6);
  });

  it("keeps calls past the limit waiting, and lets them go first come first served as slots are given back", async () => {
    const { limit, calls } = holding(4);
    limit.refused({ nowMs: NOW, sentAtMs: NOW });
    expect(limit.limit).toBe(2);
    const first = {};
    const second = {};
    const firstTurn = limit.acquire(first);
    const secondTurn = limit.acquire(second);
    expect(limit.waiting).toBe(2);
    // Two of the four give back their slots: still two in flight, the limit.
    limit.release(calls[0]!);
    limit.release(calls[1]!);
    expect(await came(firstTurn)).toBe(false);
    limit.release(calls[2]!);
    expect(await came(firstTurn)).toBe(true);
    expect(await came(secondTurn)).toBe(false);
    expect(limit.holds(first)).toBe(true);
    limit.release(calls[3]!);
    expect(await came(secondTurn)).toBe(true);
    expect(limit.inFlight).toBe(2);
  });

  it("serves a higher priority first, and first come first served within a priority", async () => {
    const { limit, calls } = holding(2);
    limit.refused({ nowMs: NOW, sentAtMs: NOW });
    expect(limit.limit).toBe(1);
    limit.release(calls[1]!);
    const low = {};
    const early = {};
    const late = {};
    const lowTurn = limit.acquire(low, -5);
    const earlyTurn = limit.acquire(early, 10);
    const lateTurn = limit.acquire(late, 10);
    limit.release(calls[0]!);
    expect([await came(earlyTurn), await came(lateTurn), await came(lowTurn)]).toEqual([true, false, false]);
    limit.release(early);
    expect([await came(lateTurn), await came(lowTurn)]).toEqual([true, false]);
    limit.release(late);
    expect(await came(lowTurn)).toBe(true);
  });

  it("lets a waiting call leave its place, and gives a slot granted to a call that left back when it is released", async () => {
    const { limit, calls } = holding(2);
    limit.refused({ nowMs: NOW, sentAtMs: NOW });
    limit.release(calls[1]!);
    const gone = {};
    const next = {};
    void limit.acquire(gone);
    const nextTurn = limit.acquire(next);
    // Gone while waiting: its place goes, and the next call is first.
    limit.release(gone);
    expect(limit.waiting).toBe(1);
    limit.release(calls[0]!);
    expect(await came(nextTurn)).toBe(true);
    // Gone mid-call: its slot comes back.
    limit.release(next);
    expect(limit.inFlight).toBe(0);
    expect(limit.acquire({})).toBe(true);
  });

  it("asked again for a call that holds a slot or waits for one, answers the same and counts it once", () => {
    const { limit } = holding(2);
    limit.refused({ nowMs: NOW, sentAtMs: NOW });
    const call = {};
    const turn = limit.acquire(call);
    expect(limit.acquire(call)).toBe(turn);
    expect(limit.waiting).toBe(1);
    const { limit: open } = holding(0);
    const mine = {};
    expect(open.acquire(mine)).toBe(true);
    expect(open.acquire(mine)).toBe(true);
    expect(open.inFlight).toBe(1);
  });

  it("lets waiting calls go as the limit grows, not only as slots are given back", async () => {
    const { limit } = holding(4);
    limit.refused({ nowMs: NOW, sentAtMs: NOW });
    expect(limit.limit).toBe(2);
    // Four still hold slots (they were in flight before the decrease); two of them answered.
    const waiter = {};
    const turn = limit.acquire(waiter);
    limit.succeeded();
    limit.succeeded();
    limit.succeeded();
    limit.succeeded();
    expect(limit.limit).toBe(3);
    expect(await came(turn)).toBe(false); // four in flight, three allowed
    limit.release({}); // not a holder: nothing
    expect(await came(turn)).toBe(false);
  });
});

describe("ConcurrencyLimits: one limit per key", () => {
  it("keeps each key's own, and forgets the least recently used idle one past its bound", () => {
    const limits = new ConcurrencyLimits({}, 2);
    const a = limits.of("a");
    const busy = {};
    a.acquire(busy);
    limits.of("b");
    limits.of("c");
    // "a" holds a slot, so "b" is forgotten.
    expect(limits.get("a")).toBe(a);
    expect(limits.get("b")).toBeUndefined();
    expect(limits.get("c")).toBeDefined();
  });
});
