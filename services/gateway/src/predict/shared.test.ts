import type { Need } from "@holdfast/predict";
import type { ReleaseSliceRequest, ReserveRequest, ReserveResponse, SliceGranted } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import { type RateWindowsApi, type Reservation, type SharedAsk, SharedSlices } from "./shared.js";

const NEED: Need = { requests: 1, tokens: 100, inputTokens: 0, outputTokens: 0 };

/** A coordinator that grants whatever is asked (or answers as told), and remembers every ask. */
class Coordinator implements RateWindowsApi {
  readonly asks: ReserveRequest[] = [];
  readonly released: ReleaseSliceRequest[] = [];
  cancelled = 0;
  /** How the next asks are answered; granted by default. */
  answer: (request: ReserveRequest) => ReserveResponse = (request) => ({
    outcome: { $case: "granted", value: grant(request, request.wantCalls) },
  });
  /** Answers wait for this before they arrive (a coordinator on the other side of the network). */
  gate: Promise<void> = Promise.resolve();
  private leases = 0;

  reserve(request: ReserveRequest): Reservation {
    this.asks.push(request);
    const response = this.answer(request);
    if (response.outcome?.$case === "granted") response.outcome.value.leaseId = `lease-${++this.leases}`;
    return {
      first: this.gate.then(() => response),
      turn: new Promise<SliceGranted>(() => undefined),
      cancel: () => {
        this.cancelled += 1;
      },
    };
  }

  async release(request: ReleaseSliceRequest): Promise<void> {
    this.released.push(request);
  }
}

function grant(request: ReserveRequest, calls: number): SliceGranted {
  const need = request.need!;
  return {
    leaseId: "",
    amounts: {
      requests: need.requests * calls,
      tokens: need.tokens * calls,
      inputTokens: need.inputTokens * calls,
      outputTokens: need.outputTokens * calls,
    },
    calls,
    validForMs: 2_000,
  };
}

function ask(nowMs: number): SharedAsk {
  return {
    keyId: "0123456789abcdef",
    upstream: "https://api.example",
    need: NEED,
    floor: NEED,
    silent: false,
    priority: 0,
    sinceMs: nowMs,
    thresholdMs: 15_000,
    deadlineMs: undefined,
  };
}

function slices(coordinator: Coordinator, clock: { now: number }): SharedSlices {
  return new SharedSlices({
    api: coordinator,
    gateway: "gw-test",
    clock: () => clock.now,
    onAvailability: () => undefined,
    sliceMs: 2_000,
  });
}

describe("a gateway's slices of a shared window", () => {
  it("asks once for calls that arrive together, and they all spend what that one ask brought", async () => {
    const coordinator = new Coordinator();
    let open!: () => void;
    coordinator.gate = new Promise((resolve) => {
      open = resolve;
    });
    const clock = { now: 1_000 };
    const shared = slices(coordinator, clock);
    // Five calls at once, a slice asked for eight: one ask covers them all.
    const decisions = Array.from({ length: 5 }, () => shared.decide(ask(clock.now)));
    open();
    const decided = await Promise.all(decisions);
    expect(decided.map((d) => d.kind)).toEqual(Array(5).fill("continue"));
    expect(coordinator.asks).toHaveLength(1);
    await shared.close();
  });

  it("asks for room for as many calls as the gateway makes on the key in a slice's time", async () => {
    const coordinator = new Coordinator();
    coordinator.answer = (request) => ({ outcome: { $case: "granted", value: grant(request, 1) } });
    const clock = { now: 1_000 };
    const shared = slices(coordinator, clock);
    // 300 calls in one second, each granted alone (a coordinator short of room) ...
    for (let i = 0; i < 300; i++) {
      const decided = await shared.decide(ask(clock.now));
      expect(decided.kind).toBe("continue");
      clock.now += 3;
    }
    // ... so the gateway asks for a slice's time of them: 2 s at 300 a second.
    expect(coordinator.asks.at(-1)!.wantCalls).toBeGreaterThanOrEqual(600);
    expect(coordinator.asks[0]!.wantCalls).toBe(8);
    await shared.close();
  });

  it("renews a slice running low in the background, and calls meanwhile never wait for the coordinator", async () => {
    const coordinator = new Coordinator();
    const clock = { now: 1_000 };
    const shared = slices(coordinator, clock);
    const first = await shared.decide(ask(clock.now));
    expect(first.kind).toBe("continue");
    expect(coordinator.asks).toHaveLength(1);
    // The coordinator is slow from now on: a call that had to ask would wait on it.
    let open!: () => void;
    coordinator.gate = new Promise((resolve) => {
      open = resolve;
    });
    // The slice covers 8 calls; spending past three quarters of it starts the renewal.
    for (let i = 0; i < 7; i++) expect((await shared.decide(ask(clock.now))).kind).toBe("continue");
    expect(coordinator.asks).toHaveLength(2);
    open();
    await new Promise((resolve) => setImmediate(resolve));
    // The renewal's slice is the key's now: the next calls spend it without asking.
    for (let i = 0; i < 5; i++) expect((await shared.decide(ask(clock.now))).kind).toBe("continue");
    expect(coordinator.asks).toHaveLength(2);
    await shared.close();
  });

  it("hands what is left of a slice that cannot cover the next call back with the ask for it", async () => {
    const coordinator = new Coordinator();
    // Room for two calls, then (the window is tight) for the call in hand alone; each call
    // costs the provider 60 tokens of the 100 it reserves.
    coordinator.answer = (request) => ({
      outcome: { $case: "granted", value: grant(request, coordinator.asks.length === 1 ? 2 : 1) },
    });
    const clock = { now: 1_000 };
    const shared = slices(coordinator, clock);
    const charged: Need = { requests: 1, tokens: 60, inputTokens: 0, outputTokens: 0 };
    for (let i = 0; i < 2; i++) {
      clock.now = 1_000 + i * 300;
      const decided = await shared.decide(ask(clock.now));
      if (decided.kind !== "continue" || decided.slice === undefined)
        throw new Error(`call ${i} did not go on`);
      shared.settle(decided.slice, NEED, charged);
    }
    await new Promise((resolve) => setImmediate(resolve));
    // Its requests are spent, its tokens not: the third call asks for room of its own, and
    // the 80 tokens left of the first slice go back with that ask, before the coordinator
    // decides on it (a renewal granted for one call only went back on its own).
    coordinator.answer = () => ({
      outcome: {
        $case: "checkpoint",
        value: { untilMs: clock.now + 5_000, why: "threshold", figures: undefined },
      },
    });
    expect((await shared.decide(ask(clock.now))).kind).toBe("checkpoint");
    expect(coordinator.asks.map((a) => a.returnedLeaseId)).toEqual(["", "", "lease-1"]);
    expect(coordinator.asks.at(-1)?.returnedLeft).toMatchObject({ requests: 0, tokens: 80 });
    // And when its last call was sent (a sliding log counts it for a window from then).
    expect(coordinator.asks.at(-1)?.returnedLastSentAtMs).toBe(1_300);
    await shared.close();
    // The renewal no call spent says none was sent.
    expect(coordinator.released.map((r) => [r.leaseId, r.lastSentAtMs])).toEqual([["lease-2", 0]]);
  });

  it("takes only an immediate grant for a renewal: a renewal the coordinator would queue is cancelled", async () => {
    const coordinator = new Coordinator();
    const clock = { now: 1_000 };
    const shared = slices(coordinator, clock);
    await shared.decide(ask(clock.now));
    coordinator.answer = () => ({
      outcome: { $case: "queued", value: { etaMs: clock.now + 500, figures: undefined } },
    });
    for (let i = 0; i < 7; i++) await shared.decide(ask(clock.now));
    await new Promise((resolve) => setImmediate(resolve));
    expect(coordinator.asks).toHaveLength(2);
    expect(coordinator.cancelled).toBe(1);
    await shared.close();
  });
});
