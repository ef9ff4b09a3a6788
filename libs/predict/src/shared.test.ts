import { describe, expect, it } from "vitest";
import type { Need } from "./keys.js";
import { declaredShapes } from "./shape.js";
import { declaredLimits, type ReserveOutcome, type ReserveRequest, SharedWindows } from "./shared.js";

const NOW = Date.parse("2026-12-04T12:00:00Z");
const KEY = "0123456789abcdef";
const UPSTREAM = "https://api.example";

const need = (tokens: number, requests = 1): Need => ({ requests, tokens, inputTokens: 0, outputTokens: 0 });

let tickets = 0;
function ask(overrides: Partial<ReserveRequest> & { need: Need }): ReserveRequest {
  return {
    ticket: `t${++tickets}`,
    keyId: KEY,
    gateway: "gw-a",
    floor: overrides.need,
    wantCalls: 1,
    priority: 0,
    sinceMs: NOW,
    thresholdMs: 15_000,
    ...overrides,
  };
}

/**
 * A key read at NOW with `tokens` of 6,000 a minute left (100 a second) and `requests` of
 * 600 (10 a second), its provider known to refill continuously.
 */
function windowsWith(tokens: number, requests = 600): SharedWindows {
  const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000, knownShape: () => "continuous" });
  windows.observe(
    KEY,
    UPSTREAM,
    {
      tokens: { limit: 6_000, remaining: tokens, resetAtMs: NOW + (6_000 - tokens) * 10 },
      requests: { limit: 600, remaining: requests, resetAtMs: NOW + (600 - requests) * 100 },
    },
    { asOfMs: NOW - 1, readAtMs: NOW, nowMs: NOW },
  );
  return windows;
}

/**
 * Takes in readings of a sliding log of 6,000 tokens a 10 s window, as a gateway that read
 * it as one records them: the answer to a call sent at `sentMs`, taken by the provider
 * `lateMs` after (its reset a window after that, unless said) and read 20 ms later; a
 * refusal when `retryAfterMs` is said.
 */
function logReader(windows: SharedWindows) {
  return (
    sentMs: number,
    left: number,
    at: { lateMs?: number; resetAtMs?: number; retryAfterMs?: number } = {},
  ): void => {
    const lateMs = at.lateMs ?? 0;
    windows.observe(
      KEY,
      UPSTREAM,
      {
        tokens: { limit: 6_000, remaining: left, resetAtMs: at.resetAtMs ?? sentMs + lateMs + 10_000 },
        ...(at.retryAfterMs === undefined ? {} : { retryAfterMs: at.retryAfterMs }),
      },
      { asOfMs: sentMs, readAtMs: sentMs + lateMs + 20, nowMs: sentMs + lateMs + 20 },
      { tokens: "sliding" },
    );
  };
}

function granted(outcome: ReserveOutcome) {
  if (outcome.kind !== "granted") throw new Error(`expected a grant, got ${JSON.stringify(outcome)}`);
  return outcome.lease;
}

describe("SharedWindows: one window per key for every gateway", () => {
  it("says nothing is known of a key before its first reading, so the call goes on", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    expect(windows.reserve(ask({ need: need(100) }), NOW)).toEqual({ kind: "unknown", validForMs: 1_000 });
  });

  it("grants a slice of several calls while the window has plenty, and just the call when asked for one", () => {
    const windows = windowsWith(6_000);
    const slice = granted(windows.reserve(ask({ need: need(100), wantCalls: 8 }), NOW));
    expect(slice.calls).toBe(8);
    expect(slice.amounts.tokens).toBe(800);
    const single = granted(windows.reserve(ask({ need: need(100) }), NOW));
    expect(single.calls).toBe(1);
    expect(windows.list(NOW)[0]?.dimensions.find((d) => d.dimension === "tokens")?.left).toBe(5_100);
  });

  it("near the window's end grants no more than a quarter of what is left beyond the call", () => {
    const windows = windowsWith(1_000);
    // 900 beyond the call; a quarter of that is 225: two more calls of 100.
    expect(granted(windows.reserve(ask({ need: need(100), wantCalls: 8 }), NOW)).calls).toBe(3);
  });

  it("queues a call that does not fit, and grants it when the window has refilled enough", () => {
    const windows = windowsWith(300);
    const queued = windows.reserve(ask({ ticket: "late", need: need(1_000) }), NOW);
    expect(queued).toMatchObject({
      kind: "queued",
      figures: { dimension: "tokens", remaining: 300, needed: 1_000 },
    });
    if (queued.kind !== "queued") return;
    // 700 missing at 100 a second.
    expect(queued.etaMs - NOW).toBeGreaterThanOrEqual(7_000);
    expect(queued.etaMs - NOW).toBeLessThan(7_100);
    expect(windows.tick(NOW + 6_900).granted).toEqual([]);
    const { granted: turn } = windows.tick(queued.etaMs);
    expect(turn.map((g) => g.ticket)).toEqual(["late"]);
    expect(turn[0]?.lease.amounts.tokens).toBe(1_000);
  });

  it("reads the refill rate as a lower bound of what readings show, the highest one seen for the limit", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    const read = (remaining: number, resetInMs: number, atMs: number) =>
      windows.observe(
        KEY,
        UPSTREAM,
        { requests: { limit: 60, remaining, resetAtMs: atMs + resetInMs } },
        { asOfMs: atMs - 1, readAtMs: atMs, nowMs: atMs },
      );
    const perMinute = () => windows.list(NOW + 60_000)[0]?.dimensions[0]?.perMinute;
    // 60 a minute, one a second: 10.4 missing shows as 50 left (floored), full in 11 s (rounded up).
    read(50, 11_000, NOW);
    // At most 9 missing over 11 s: a rate below the truth, so a turn is never granted early.
    expect(perMinute()).toBe(49);
    read(40, 20_000, NOW + 1_000);
    expect(perMinute()).toBe(57);
    // A reading that shows a lower bound below the one known does not lower it.
    read(30, 40_000, NOW + 2_000);
    expect(perMinute()).toBe(57);
  });

  it("serves the queue in order, each waiter's turn after those ahead of it", () => {
    const windows = windowsWith(0);
    const first = windows.reserve(ask({ ticket: "first", need: need(500), sinceMs: NOW }), NOW);
    const second = windows.reserve(ask({ ticket: "second", need: need(500), sinceMs: NOW + 1 }), NOW + 1);
    if (first.kind !== "queued" || second.kind !== "queued") throw new Error("expected both queued");
    expect(second.etaMs - first.etaMs).toBeGreaterThanOrEqual(4_900);
    expect(windows.tick(first.etaMs).granted.map((g) => g.ticket)).toEqual(["first"]);
    expect(windows.tick(first.etaMs + 10).granted).toEqual([]);
    expect(windows.tick(second.etaMs).granted.map((g) => g.ticket)).toEqual(["second"]);
  });

  it("serves a higher priority first, and a waiter's priority grows as it waits, so nobody starves", () => {
    const windows = windowsWith(0);
    windows.reserve(ask({ ticket: "low", need: need(500), priority: 0, sinceMs: NOW }), NOW);
    windows.reserve(ask({ ticket: "high", need: need(500), priority: 2, sinceMs: NOW + 1 }), NOW + 1);
    expect(windows.tick(NOW + 5_100).granted.map((g) => g.ticket)).toEqual(["high"]);
    // Priority 1 arriving now is behind "low", which has waited 10 s (priority 0 + 1) since NOW.
    windows.reserve(
      ask({ ticket: "later", need: need(500), priority: 1, sinceMs: NOW + 10_001 }),
      NOW + 10_001,
    );
    expect(windows.tick(NOW + 10_300).granted.map((g) => g.ticket)).toEqual(["low"]);
  });

  it("a call arriving with a long wait behind it (a checkpointed run coming back) is ahead of newer waiters", () => {
    const windows = windowsWith(0);
    windows.reserve(ask({ ticket: "new", need: need(500), sinceMs: NOW }), NOW);
    const back = windows.reserve(ask({ ticket: "back", need: need(500), sinceMs: NOW - 30_000 }), NOW);
    expect(back.kind).toBe("queued");
    expect(windows.tick(NOW + 5_100).granted.map((g) => g.ticket)).toEqual(["back"]);
  });

  it("tells a call to checkpoint when its turn is further off than its threshold, or past its deadline", () => {
    const windows = windowsWith(0);
    expect(windows.reserve(ask({ need: need(2_000), thresholdMs: 15_000 }), NOW)).toMatchObject({
      kind: "checkpoint",
      why: "threshold",
    });
    expect(
      windows.reserve(ask({ need: need(500), thresholdMs: 15_000, deadlineMs: NOW + 1_000 }), NOW),
    ).toMatchObject({ kind: "checkpoint", why: "deadline" });
    // Neither queued: the next call's turn is not pushed back by them.
    const next = windows.reserve(ask({ need: need(500) }), NOW);
    expect(next.kind === "queued" && next.etaMs - NOW).toBeLessThan(5_100);
  });

  it("refuses at once a call that takes for certain more than the whole window", () => {
    const windows = windowsWith(6_000);
    expect(windows.reserve(ask({ need: need(7_000), floor: need(6_500) }), NOW)).toMatchObject({
      kind: "too_large",
      figures: { dimension: "tokens", limit: 6_000, needed: 6_500 },
    });
    // A margin beyond the window (the floor fits) is cut to the window.
    expect(windows.reserve(ask({ need: need(7_000), floor: need(5_000) }), NOW).kind).toBe("granted");
  });

  it("blocks on requests left however many tokens are", () => {
    const windows = windowsWith(6_000, 0);
    const outcome = windows.reserve(ask({ need: need(10) }), NOW);
    expect(outcome).toMatchObject({ kind: "queued", figures: { dimension: "requests" } });
  });

  it("takes back what a slice's calls did not use, by what the gateway says is left in all, and takes more when they cost more", () => {
    const windows = windowsWith(1_000);
    const lease = granted(windows.reserve(ask({ need: need(1_000) }), NOW));
    const left = () => windows.list(NOW)[0]?.dimensions.find((d) => d.dimension === "tokens")?.left;
    expect(left()).toBe(0);
    windows.release(lease.leaseId, need(400, 0), NOW);
    expect(left()).toBe(400);
    // Said again (a retried request): nothing more.
    windows.release(lease.leaseId, need(400, 0), NOW);
    expect(left()).toBe(400);
    // More came back since (another of its calls finished): the difference.
    windows.release(lease.leaseId, need(500, 0), NOW);
    expect(left()).toBe(500);
    // Never more than the slice held.
    windows.release(lease.leaseId, need(5_000, 0), NOW);
    expect(left()).toBe(1_000);
    const more = granted(windows.reserve(ask({ need: need(400) }), NOW));
    windows.release(more.leaseId, need(-100, 0), NOW);
    expect(left()).toBe(500);
  });

  it("hands back the previous slice with the next ask", () => {
    const windows = windowsWith(1_000);
    const lease = granted(windows.reserve(ask({ need: need(1_000) }), NOW));
    const next = windows.reserve(
      ask({ need: need(600), returned: { leaseId: lease.leaseId, left: need(700, 0) } }),
      NOW,
    );
    expect(next.kind).toBe("granted");
  });

  it("lowers the account when a reading shows the key spent elsewhere, and never raises it from one", () => {
    const windows = windowsWith(6_000);
    granted(windows.reserve(ask({ need: need(1_000) }), NOW));
    const tokensLeft = () =>
      windows.list(NOW + 10)[0]?.dimensions.find((d) => d.dimension === "tokens")?.left;
    // 5,000, and 10 ms of refill at 100 a second.
    expect(tokensLeft()).toBe(5_001);
    // A client outside Holdfast spent 3,000 before our call, sent at NOW + 5, was admitted.
    windows.observe(
      KEY,
      UPSTREAM,
      { tokens: { limit: 6_000, remaining: 2_000, resetAtMs: NOW + 40_000 } },
      { asOfMs: NOW + 5, readAtMs: NOW + 10, nowMs: NOW + 10 },
    );
    expect(tokensLeft()).toBe(2_000);
    // A reading of a fuller window (nothing else spent) does not undo what the account granted.
    windows.observe(
      KEY,
      UPSTREAM,
      { tokens: { limit: 6_000, remaining: 6_000, resetAtMs: NOW + 10 } },
      { asOfMs: NOW + 6, readAtMs: NOW + 10, nowMs: NOW + 10 },
    );
    expect(tokensLeft()).toBe(2_000);
  });

  it("counts what it granted after a reading's call against that reading", () => {
    const windows = windowsWith(6_000);
    // Granted at NOW + 20, after the call the next reading answers (sent at NOW + 10).
    granted(windows.reserve(ask({ need: need(1_000) }), NOW + 20));
    windows.observe(
      KEY,
      UPSTREAM,
      { tokens: { limit: 6_000, remaining: 4_000, resetAtMs: NOW + 30_000 } },
      { asOfMs: NOW + 10, readAtMs: NOW + 30, nowMs: NOW + 30 },
    );
    // 4,000 then, and our 1,000 granted since: 3,000.
    expect(windows.list(NOW + 30)[0]?.dimensions.find((d) => d.dimension === "tokens")?.left).toBe(3_000);
  });

  it("holds every grant back until a 429's retry-after has passed", () => {
    const windows = windowsWith(6_000);
    windows.observe(KEY, UPSTREAM, { retryAfterMs: 2_000 }, { asOfMs: NOW, readAtMs: NOW, nowMs: NOW });
    const outcome = windows.reserve(ask({ need: need(10) }), NOW + 100);
    expect(outcome.kind === "queued" && outcome.etaMs).toBeGreaterThanOrEqual(NOW + 2_000);
    expect(windows.tick(NOW + 1_900).granted).toEqual([]);
    expect(windows.tick(NOW + 2_010).granted).toHaveLength(1);
  });

  it("forgets a waiter that leaves: the next in line gets its turn", () => {
    const windows = windowsWith(0);
    windows.reserve(ask({ ticket: "gone", need: need(500), sinceMs: NOW }), NOW);
    windows.reserve(ask({ ticket: "stays", need: need(500), sinceMs: NOW + 1 }), NOW + 1);
    windows.cancel("gone");
    expect(windows.tick(NOW + 5_100).granted.map((g) => g.ticket)).toEqual(["stays"]);
  });

  it("never grants two gateways together more than the provider admits, whatever the order of their asks", () => {
    // The provider: 6,000 tokens a minute, refilled continuously, charged input + max_tokens.
    let level = 6_000;
    let at = NOW;
    let spent = 0;
    const provider = (now: number, cost: number) => {
      level = Math.min(6_000, level + ((now - at) * 6_000) / 60_000);
      at = now;
      if (level < cost) return false;
      level -= cost;
      spent += cost;
      return true;
    };
    // Only the first answer is read here, so the shape is given (what readings would show).
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000, knownShape: () => "continuous" });
    let seed = 42;
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    let refused = 0;
    let admitted = 0;
    const slices = new Map<string, { leaseId: string; left: number }>();
    const waiting: Array<{ gateway: string; cost: number }> = [];
    for (let now = NOW; now < NOW + 120_000; now += 50) {
      // Each gateway sends a call every 250 ms or so, of 200–700 tokens (input + max_tokens):
      // together about three times what the window refills.
      for (const gateway of ["gw-a", "gw-b"]) {
        if (random() < 0.2) waiting.push({ gateway, cost: 200 + Math.floor(random() * 500) });
      }
      for (const { ticket } of windows.tick(now).granted) {
        const [gateway, cost] = ticket.split("|") as [string, string];
        if (provider(now, Number(cost))) admitted++;
        else refused++;
        void gateway;
      }
      while (waiting.length > 0) {
        const call = waiting.shift()!;
        const slice = slices.get(call.gateway);
        if (slice !== undefined && slice.left >= call.cost) {
          slice.left -= call.cost;
          if (provider(now, call.cost)) admitted++;
          else refused++;
          continue;
        }
        const outcome = windows.reserve(
          ask({
            ticket: `${call.gateway}|${call.cost}|${now}|${Math.random()}`,
            gateway: call.gateway,
            need: need(call.cost),
            wantCalls: 4,
            sinceMs: now,
            returned: slice === undefined ? undefined : { leaseId: slice.leaseId, left: need(slice.left, 0) },
          }),
          now,
        );
        slices.delete(call.gateway);
        if (outcome.kind === "unknown") {
          if (provider(now, call.cost)) admitted++;
          else refused++;
        } else if (outcome.kind === "granted") {
          slices.set(call.gateway, {
            leaseId: outcome.lease.leaseId,
            left: outcome.lease.amounts.tokens - call.cost,
          });
          if (provider(now, call.cost)) admitted++;
          else refused++;
        }
        // The first answer's reading (the provider's own level after it).
        if (admitted === 1) {
          windows.observe(
            KEY,
            UPSTREAM,
            { tokens: { limit: 6_000, remaining: Math.floor(level), resetAtMs: now + (6_000 - level) * 10 } },
            { asOfMs: now, readAtMs: now, nowMs: now },
          );
        }
      }
    }
    expect(refused).toBe(0);
    // And the window is used: the first 6,000, then nearly all of 100 a second for 120 s.
    expect(spent).toBeGreaterThan(0.95 * (6_000 + 12_000));
    expect(admitted).toBeGreaterThan(30);
  });

  it("a fleet starting at once on a fresh key queues for its window rather than checkpointing on a minute's refill", () => {
    // The first answer on a fresh key: 41 of 42 requests left, whole again in 24 ms (42 a
    // second). One unit missing is no bound of the rate, so grants go by a minute's refill
    // until a reading measures it; but the turns of the calls beyond the 41 are foretold at
    // the rate the reading suggests, and none of 60 is told to checkpoint (15 s threshold:
    // at a minute's refill the last would be 27 s off).
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    windows.observe(
      KEY,
      UPSTREAM,
      { requests: { limit: 42, remaining: 41, resetAtMs: NOW + 24 } },
      { asOfMs: NOW - 5, readAtMs: NOW, nowMs: NOW },
    );
    const outcomes = Array.from({ length: 60 }, (_, i) =>
      windows.reserve(ask({ need: need(0), sinceMs: NOW - 60 + i }), NOW),
    );
    expect(outcomes.filter((o) => o.kind === "granted")).toHaveLength(41);
    const queued = outcomes.filter((o) => o.kind === "queued");
    expect(queued).toHaveLength(19);
    expect(outcomes.some((o) => o.kind === "checkpoint")).toBe(false);
    // Never more granted than the bound allows: before the shape or the rate is known, only
    // what the reading said was missing is back, by its reset.
    expect(windows.tick(NOW + 300).granted).toHaveLength(1);
  });

  it("learns a fixed window from its readings: nothing back before the reset, the whole window at it", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    // A window of 6,000 tokens cleared at NOW + 30 s, read three times 5 s apart as it is spent.
    for (const [after, left] of [
      [-10_000, 3_000],
      [-5_000, 2_000],
      [0, 1_000],
    ] as const) {
      windows.observe(
        KEY,
        UPSTREAM,
        { tokens: { limit: 6_000, remaining: left, resetAtMs: NOW + 30_000 } },
        { asOfMs: NOW + after - 1, readAtMs: NOW + after, nowMs: NOW + after },
      );
    }
    // 1,000 left: one call of 1,000 goes; the next waits for the reset, not for a refill.
    granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW));
    const waiting = windows.reserve(ask({ ticket: "next", need: need(1_000, 0), thresholdMs: 60_000 }), NOW);
    expect(waiting).toMatchObject({ kind: "queued" });
    if (waiting.kind === "queued") expect(waiting.etaMs).toBeGreaterThanOrEqual(NOW + 30_000);
    expect(windows.tick(NOW + 29_000).granted).toEqual([]);
    // At the reset the window is whole: the waiter, and five more like it, and no seventh.
    expect(windows.tick(NOW + 30_010).granted.map((g) => g.ticket)).toEqual(["next"]);
    for (let i = 0; i < 5; i++) granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW + 30_010));
    expect(windows.reserve(ask({ need: need(1_000, 0), thresholdMs: 600_000 }), NOW + 30_010).kind).toBe(
      "queued",
    );
  });

  it("takes the shape another gateway learnt when its own readings have not told it yet", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    // One reading, 1,000 of 6,000 left, whole in 50 s: a gateway had read it as refilling evenly.
    windows.observe(
      KEY,
      UPSTREAM,
      { tokens: { limit: 6_000, remaining: 1_000, resetAtMs: NOW + 50_000 } },
      { asOfMs: NOW - 1, readAtMs: NOW, nowMs: NOW },
      { tokens: "continuous" },
    );
    granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW));
    // 100 tokens a second: 1,000 more is there in about 10 s, not at the reset.
    const waiting = windows.reserve(ask({ need: need(1_000, 0), thresholdMs: 60_000 }), NOW);
    expect(waiting.kind).toBe("queued");
    if (waiting.kind === "queued") expect(waiting.etaMs).toBeLessThan(NOW + 15_000);
  });

  it("counts a window read as a sliding log as the log of what it granted: each call's spend back a window after it", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    // A log of 6,000 tokens a 10 s window: each reading's reset is a window after its call.
    const read = logReader(windows);
    // A call not granted here (the key was not known yet) spent 1,000; two granted calls 2,000
    // each, their gateway saying when it sent them as it handed their slices back.
    read(NOW + 7, 5_000);
    const first = granted(windows.reserve(ask({ need: need(2_000, 0) }), NOW + 1_007));
    read(NOW + 1_007, 3_000);
    windows.release(first.leaseId, need(0, 0), NOW + 1_100, NOW + 1_007);
    const second = granted(windows.reserve(ask({ need: need(2_000, 0) }), NOW + 2_007));
    read(NOW + 2_007, 1_000);
    windows.release(second.leaseId, need(0, 0), NOW + 2_100, NOW + 2_007);
    expect(windows.list(NOW + 3_007)[0]?.dimensions[0]?.left).toBe(1_000);
    const waiting = windows.reserve(
      ask({ ticket: "next", need: need(2_000, 0), thresholdMs: 60_000 }),
      NOW + 3_007,
    );
    expect(waiting.kind).toBe("queued");
    // The first call's 1,000 is back a window after it, not when the last call's is (NOW + 12 s).
    if (waiting.kind === "queued") expect(waiting.etaMs).toBeLessThan(NOW + 10_100);
    // A refusal's reset is of the calls before it: it says nothing of how long a call counts
    // (it only allows calls 100 ms more to reach the provider).
    read(NOW + 3_500, 1_000, { resetAtMs: NOW + 12_007, retryAfterMs: 500 });
    expect(windows.tick(NOW + 9_990).granted).toEqual([]);
    expect(windows.tick(NOW + 10_020).granted.map((g) => g.ticket)).toEqual(["next"]);
    // A granted call counts for a window (and a little, for the network) from when its
    // gateway sent it; one whose gateway has not said, until a window after its slice's end.
    expect(windows.list(NOW + 11_200)[0]?.dimensions[0]?.left).toBe(0);
    expect(windows.list(NOW + 11_300)[0]?.dimensions[0]?.left).toBe(2_000);
    expect(windows.list(NOW + 12_300)[0]?.dimensions[0]?.left).toBe(4_000);
    expect(windows.list(NOW + 22_200)[0]?.dimensions[0]?.left).toBe(4_000);
    expect(windows.list(NOW + 22_300)[0]?.dimensions[0]?.left).toBe(6_000);
  });

  it("counts a sliding log's slice of several calls for a window after its gateway handed it back", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    const read = logReader(windows);
    // A first call of 100, not granted here (the key was not known yet).
    read(NOW + 7, 5_900);
    const slice = granted(windows.reserve(ask({ need: need(500, 0), wantCalls: 4 }), NOW + 1_007));
    // A quarter of what is left beyond the call: two more.
    expect(slice.calls).toBe(3);
    // Its gateway spent two of the three calls, and handed it back 500 ms after the grant
    // without saying when it sent them.
    windows.release(slice.leaseId, need(500, 0), NOW + 1_507);
    expect(windows.list(NOW + 2_000)[0]?.dimensions[0]?.left).toBe(4_900);
    // Back a window (and a little) after it was handed back, not after the slice's end.
    expect(windows.list(NOW + 11_500)[0]?.dimensions[0]?.left).toBe(5_000);
    expect(windows.list(NOW + 11_700)[0]?.dimensions[0]?.left).toBe(6_000);
    // Said, when it sent the last: a window after that (a later word never moves it earlier).
    const said = granted(windows.reserve(ask({ need: need(500, 0), wantCalls: 4 }), NOW + 12_007));
    windows.release(said.leaseId, need(500, 0), NOW + 12_507, NOW + 12_207);
    windows.release(said.leaseId, need(500, 0), NOW + 12_600, NOW + 12_100);
    expect(windows.list(NOW + 22_300)[0]?.dimensions[0]?.left).toBe(5_000);
    expect(windows.list(NOW + 22_320)[0]?.dimensions[0]?.left).toBe(6_000);
  });

  it("allows calls on a sliding log more time to reach the provider after each refusal, up to a tenth of the window", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    const read = logReader(windows);
    read(NOW + 7, 6_000);
    const call = granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW + 1_007));
    read(NOW + 1_007, 5_000);
    windows.release(call.leaseId, need(0, 0), NOW + 1_050, NOW + 1_007);
    // A window and 100 ms (a hundredth of it) after it was sent.
    expect(windows.list(NOW + 11_100)[0]?.dimensions[0]?.left).toBe(5_000);
    expect(windows.list(NOW + 11_110)[0]?.dimensions[0]?.left).toBe(6_000);
    // A refusal: 100 ms more.
    read(NOW + 2_007, 5_000, { retryAfterMs: 100 });
    expect(windows.list(NOW + 11_200)[0]?.dimensions[0]?.left).toBe(5_000);
    expect(windows.list(NOW + 11_210)[0]?.dimensions[0]?.left).toBe(6_000);
    // However many refusals, no more than a tenth of the window in all.
    for (let i = 0; i < 20; i++) read(NOW + 2_107 + i, 5_000, { retryAfterMs: 100 });
    expect(windows.list(NOW + 12_000)[0]?.dimensions[0]?.left).toBe(5_000);
    expect(windows.list(NOW + 12_010)[0]?.dimensions[0]?.left).toBe(6_000);
  });

  it("allows calls on a sliding log as long to reach the provider as its readings show they take", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    // The provider took a call `lateMs` after its gateway sent it: its reset is that much later.
    const read = logReader(windows);
    read(NOW + 7, 5_900, { lateMs: 0 });
    const call = granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW + 1_007));
    read(NOW + 1_007, 4_900, { lateMs: 300 });
    windows.release(call.leaseId, need(0, 0), NOW + 1_400, NOW + 1_007);
    // Counted until a window after the quickest took, and 300 ms (and a few) for the slowest.
    expect(windows.list(NOW + 11_300)[0]?.dimensions[0]?.left).toBe(5_000);
    expect(windows.list(NOW + 11_320)[0]?.dimensions[0]?.left).toBe(6_000);
  });

  it("counts a sliding log's call sent again after a 429 from its second send, however late that is said", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    const read = logReader(windows);
    read(NOW + 7, 5_000);
    const call = granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW + 1_007));
    // Handed back as its retry waits 8 s: sent again at NOW + 9 s, said so ahead of time.
    windows.release(call.leaseId, need(0, 0), NOW + 1_100, NOW + 9_007);
    expect(windows.list(NOW + 18_000)[0]?.dimensions[0]?.left).toBe(5_000);
    expect(windows.list(NOW + 19_200)[0]?.dimensions[0]?.left).toBe(6_000);
    // A second call whose first word came before its retry's send was known: let go of a
    // window after its first send, then held again when its gateway says when it sent again.
    const second = granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW + 20_007));
    windows.release(second.leaseId, need(0, 0), NOW + 20_100, NOW + 20_007);
    expect(windows.list(NOW + 30_200)[0]?.dimensions[0]?.left).toBe(6_000);
    read(NOW + 30_200, 6_000);
    windows.release(second.leaseId, need(0, 0), NOW + 30_300, NOW + 28_007);
    expect(windows.list(NOW + 38_000)[0]?.dimensions[0]?.left).toBe(5_000);
    expect(windows.list(NOW + 38_200)[0]?.dimensions[0]?.left).toBe(6_000);
  });

  it("keeps a sliding log's window when one reading's reset comes out short", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    const read = logReader(windows);
    read(NOW + 7, 5_000);
    const call = granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW + 1_007));
    read(NOW + 1_007, 4_000);
    windows.release(call.leaseId, need(0, 0), NOW + 1_050, NOW + 1_007);
    // A 429 the provider sent with no retry-after: its reset is of the calls before it, 3 s
    // after its own send, and nothing marks it a refusal.
    read(NOW + 8_007, 4_000, { resetAtMs: NOW + 11_007 });
    // The call still counts until a window after it was sent, not 3 s after.
    expect(windows.list(NOW + 11_000)[0]?.dimensions[0]?.left).toBe(5_000);
    expect(windows.list(NOW + 11_200)[0]?.dimensions[0]?.left).toBe(6_000);
  });

  it("takes a sliding log's reading that shows more spent than it granted as spent elsewhere, for a window", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    const read = logReader(windows);
    read(NOW + 7, 6_000);
    const call = granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW + 1_007));
    // 2,500 more spent than this call: a client that bypasses Holdfast.
    read(NOW + 1_007, 2_500);
    windows.release(call.leaseId, need(0, 0), NOW + 1_050, NOW + 1_007);
    expect(windows.list(NOW + 1_100)[0]?.dimensions[0]?.left).toBe(2_500);
    // Read again with nothing more spent: counted once, not twice.
    read(NOW + 1_500, 2_500);
    expect(windows.list(NOW + 1_600)[0]?.dimensions[0]?.left).toBe(2_500);
    // Back a window after the reading's call (the other spend was at or before it).
    expect(windows.list(NOW + 11_010)[0]?.dimensions[0]?.left).toBe(5_000);
    expect(windows.list(NOW + 11_200)[0]?.dimensions[0]?.left).toBe(6_000);
  });

  it("a fixed window whose period was seen is whole at every reset after, with no reading since", () => {
    // Slices last longer than the test, so nothing comes back as an unspent slice would.
    const windows = new SharedWindows({ sliceMs: 600_000, agingMs: 10_000 });
    // A window of 6,000 tokens cleared every 10 s: read falling in one period (fixed), then in
    // the next (its reset 10 s on: the period), then spent.
    const read = (atMs: number, left: number, resetAtMs: number) =>
      windows.observe(
        KEY,
        UPSTREAM,
        { tokens: { limit: 6_000, remaining: left, resetAtMs } },
        { asOfMs: atMs - 1, readAtMs: atMs, nowMs: atMs },
      );
    read(NOW + 1_000, 5_000, NOW + 10_000);
    read(NOW + 3_000, 4_000, NOW + 10_000);
    read(NOW + 11_000, 5_000, NOW + 20_000);
    expect(windows.list(NOW + 11_000)[0]?.dimensions[0]?.left).toBe(5_000);
    for (let i = 0; i < 5; i++) granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW + 11_000));
    expect(windows.reserve(ask({ need: need(1_000, 0), thresholdMs: 60_000 }), NOW + 11_000).kind).toBe(
      "queued",
    );
    // No reading comes; the reset at NOW + 20 s gives it all back, and so does the one at NOW + 30 s.
    expect(windows.tick(NOW + 19_000).granted).toEqual([]);
    expect(windows.tick(NOW + 20_010).granted).toHaveLength(1);
    for (let i = 0; i < 5; i++) granted(windows.reserve(ask({ need: need(1_000, 0) }), NOW + 20_010));
    expect(windows.reserve(ask({ need: need(1_000, 0), thresholdMs: 60_000 }), NOW + 20_010).kind).toBe(
      "queued",
    );
    expect(windows.tick(NOW + 29_000).granted).toEqual([]);
    expect(windows.tick(NOW + 30_010).granted).toHaveLength(1);
  });

  it("keeps granting on a key of unknown shape whose readings' resets have passed when taken in", () => {
    // 100 requests a minute; one call a second, each answer saying 99 of 100 left, whole
    // again in 6 ms (OpenAI's way of saying a token bucket is nearly full).
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000 });
    let granted = 0;
    for (let i = 0; i < 300; i++) {
      const at = NOW + i * 1_000;
      windows.observe(
        KEY,
        UPSTREAM,
        { requests: { limit: 100, remaining: 99, resetAtMs: at + 6 } },
        { asOfMs: at - 1, readAtMs: at, nowMs: at + 10 },
      );
      const outcome = windows.reserve(ask({ need: need(0, 1), thresholdMs: 60_000 }), at + 10);
      if (outcome.kind === "granted") {
        granted += 1;
        windows.release(outcome.lease.leaseId, need(0, 0), at + 20);
      }
    }
    expect(granted).toBe(300);
  });

  it("a window of unknown shape is not shut for good by what was granted after its reset, with no reading since", () => {
    // Slices last longer than the test, so nothing comes back as an unspent slice would.
    const windows = new SharedWindows({ sliceMs: 600_000, agingMs: 10_000 });
    // One reading, its shape not told yet: 5,000 of 6,000 tokens left, whole in 100 ms.
    windows.observe(
      KEY,
      UPSTREAM,
      { tokens: { limit: 6_000, remaining: 5_000, resetAtMs: NOW + 100 } },
      { asOfMs: NOW - 1, readAtMs: NOW, nowMs: NOW },
    );
    // Past its reset the window is whole: one call of 4,000 goes, the next waits.
    granted(windows.reserve(ask({ need: need(4_000, 0) }), NOW + 200));
    const waiting = windows.reserve(
      ask({ ticket: "next", need: need(4_000, 0), thresholdMs: 60_000 }),
      NOW + 200,
    );
    expect(waiting.kind).toBe("queued");
    // The first call was answered, but its reading was not one a gateway records, and every
    // other call waits here: no reading comes. The key still lets the waiter go, within the
    // minute a window with no reset said is taken to refill in, not never.
    expect(windows.tick(NOW + 60_200).granted.map((g) => g.ticket)).toEqual(["next"]);
  });
});

describe("SharedWindows: limits an operator declared for an upstream that reports none", () => {
  // 6,000 tokens and 60 requests a minute, said in predict.limits; the answers carry no headers.
  const declared = { windowMs: 60_000, amounts: { tokens: 6_000, requests: 60 } };

  it("keeps a declared window refilled evenly as the account of a key nothing was read of", () => {
    const windows = new SharedWindows({
      sliceMs: 2_000,
      agingMs: 10_000,
      knownShape: () => "continuous",
      declaredLimits: (upstream) => (upstream === UPSTREAM ? declared : undefined),
    });
    // Another upstream with nothing declared is still unknown: the gateway decides alone.
    expect(windows.reserve(ask({ need: need(100), upstream: "https://other.example" }), NOW).kind).toBe(
      "unknown",
    );
    granted(windows.reserve(ask({ need: need(6_000), upstream: UPSTREAM }), NOW));
    const next = windows.reserve(ask({ ticket: "next", need: need(1_000), upstream: UPSTREAM }), NOW);
    // 1,000 tokens at 100 a second, from when the first call can have reached the provider
    // (a twentieth of the window after its grant: the provider's window stayed full until then).
    expect(next).toMatchObject({ kind: "queued" });
    expect(windows.tick(NOW + 10_010).granted).toEqual([]);
    expect(windows.tick(NOW + 13_010).granted.map((g) => g.ticket)).toEqual(["next"]);
  });

  it("counts a declared window of any other shape as a sliding log of what it granted: back a window after its slice ends", () => {
    const windows = new SharedWindows({
      sliceMs: 2_000,
      agingMs: 10_000,
      declaredLimits: () => declared,
    });
    const first = granted(windows.reserve(ask({ need: need(4_000), upstream: UPSTREAM }), NOW));
    granted(windows.reserve(ask({ need: need(2_000), upstream: UPSTREAM }), NOW + 30_000));
    expect(
      windows.reserve(
        ask({ ticket: "next", need: need(3_000), upstream: UPSTREAM, thresholdMs: 120_000 }),
        NOW + 30_000,
      ),
    ).toMatchObject({
      kind: "queued",
      // The first slice's 4,000 count until a window after it could last be spent.
      etaMs: NOW + 62_000 + 5,
    });
    // Half of the first slice went unspent: it counts no longer once given back.
    windows.release(first.leaseId, need(2_000, 0), NOW + 31_000);
    expect(windows.tick(NOW + 31_000).granted).toEqual([]);
    expect(windows.tick(NOW + 62_010).granted.map((g) => g.ticket)).toEqual(["next"]);
  });

  it("counts what a coordinator before a restart granted on a declared key", () => {
    const windows = new SharedWindows({
      sliceMs: 2_000,
      agingMs: 10_000,
      knownShape: () => "continuous",
      declaredLimits: () => declared,
    });
    windows.restore(
      {
        leaseId: "before",
        keyId: KEY,
        upstream: UPSTREAM,
        gateway: "gw-a",
        atMs: NOW - 1_000,
        expiresMs: NOW + 1_000,
        amounts: need(6_000),
      },
      NOW,
    );
    expect(windows.reserve(ask({ need: need(1_000), upstream: UPSTREAM }), NOW).kind).toBe("queued");
  });

  it("finds a declaration by the origin a key's upstream is named by, however its URL was written", () => {
    const lookup = declaredLimits({ "HTTP://LLM.internal:80/v1/": { window_s: 60, tokens: 30_000 } });
    expect(lookup("http://llm.internal")).toEqual({ windowMs: 60_000, amounts: { tokens: 30_000 } });
    expect(lookup("http://llm.internal:8000")).toBeUndefined();
    const shapes = declaredShapes({ "https://api.example:443/": "fixed", "https://other.example": "auto" });
    expect(shapes("https://api.example")).toBe("fixed");
    expect(shapes("https://other.example")).toBeUndefined();
  });

  it("gives way to the key's own readings once its answers carry them", () => {
    const windows = new SharedWindows({ sliceMs: 2_000, agingMs: 10_000, declaredLimits: () => declared });
    granted(windows.reserve(ask({ need: need(6_000), upstream: UPSTREAM }), NOW));
    windows.observe(
      KEY,
      UPSTREAM,
      { tokens: { limit: 12_000, remaining: 12_000, resetAtMs: NOW + 1_000 } },
      { asOfMs: NOW + 1_000, readAtMs: NOW + 1_500, nowMs: NOW + 1_500 },
    );
    granted(windows.reserve(ask({ need: need(10_000), upstream: UPSTREAM }), NOW + 1_500));
  });
});
