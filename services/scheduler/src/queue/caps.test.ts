import { describe, expect, it } from "vitest";
import { CapBook, parseRateLimit } from "./caps.js";

// Per-partition-key caps, with the clock in hand: what a worker asking for work is handed.

const acme = { tenant: "acme", agent: "research", partitionKey: "customer-1" };
const globex = { tenant: "globex", agent: "research", partitionKey: "customer-1" };

describe("per-key caps", () => {
  it("runs at most concurrency_per_key of one tenant's key at once; another tenant's own slots are its own", () => {
    const caps = { ceilingMs: 0, concurrencyPerKey: 2, startsPerMinute: 0 };
    const book = new CapBook();
    for (let i = 0; i < 2; i++) {
      expect(book.check(acme, caps, true, 0).allowed).toBe(true);
      book.started(acme, true, 0);
    }
    expect(book.check(acme, caps, true, 0)).toEqual({
      allowed: false,
      why: "concurrency",
      retryAtMs: undefined,
    });
    expect(book.check(globex, caps, true, 0).allowed).toBe(true);
    // A slot frees the moment a run stops running (ended, or its worker lost).
    book.stopped(acme);
    expect(book.check(acme, caps, true, 0).allowed).toBe(true);
  });

  it('starts at most "2/min" in any 60 s: four items start at 0 s, 0 s, 60 s and 60 s', () => {
    const caps = { ceilingMs: 0, concurrencyPerKey: 0, startsPerMinute: parseRateLimit("2/min")! };
    const book = new CapBook();
    const startedAt: number[] = [];
    let now = 0;
    for (let item = 0; item < 4; item++) {
      for (;;) {
        const check = book.check(acme, caps, true, now);
        if (check.allowed) break;
        expect(check.why).toBe("start_rate");
        now = check.retryAtMs!;
      }
      book.started(acme, true, now);
      book.stopped(acme);
      startedAt.push(now);
    }
    expect(startedAt).toEqual([0, 0, 60_000, 60_000]);
  });

  it('reads "1/sec" as a burst of 60 a minute, and counts only first starts (a run resumed elsewhere is not a new start)', () => {
    expect(parseRateLimit("1/sec")).toBe(60);
    expect(parseRateLimit("30/min")).toBe(30);
    expect(parseRateLimit("10/s")).toBe(600);
    expect(parseRateLimit("")).toBeUndefined();
    expect(() => parseRateLimit("fast")).toThrow(/30\/min/);
    const caps = { ceilingMs: 0, concurrencyPerKey: 0, startsPerMinute: 60 };
    const book = new CapBook();
    for (let i = 0; i < 60; i++) book.started(acme, true, 1_000);
    expect(book.check(acme, caps, true, 1_000).allowed).toBe(false);
    expect(book.check(acme, caps, false, 1_000).allowed).toBe(true);
    expect(book.check(acme, caps, true, 61_001).allowed).toBe(true);
  });
});
