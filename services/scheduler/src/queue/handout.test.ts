import { KeyWindows } from "@holdfast/predict";
import type { Prediction } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import { CapBook } from "./caps.js";
import { NextSteps, pick } from "./handout.js";
import type { Queued, WorkerLink } from "./state.js";

// Which queued run a worker takes next, with the clock in hand.

const NOW = Date.parse("2026-12-03T12:00:00Z");
const KEY = "0123456789abcdef";
const NO_CAPS = { ceilingMs: 0, concurrencyPerKey: 0, startsPerMinute: 0 };

const worker: WorkerLink = {
  id: "w1",
  name: "worker-1",
  serves: new Set(["research\u00001", "triage\u00001"]),
  slots: 4,
  send: () => undefined,
};

function queued(runId: string, fields: Partial<Queued> = {}): Queued {
  return {
    runId,
    agent: "research",
    version: "1",
    tenant: "",
    tag: "",
    partitionKey: "",
    caps: NO_CAPS,
    submittedMs: NOW,
    firstStart: true,
    held: false,
    notBeforeMs: 0,
    ...fields,
  };
}

const listOf = (...runs: Queued[]) => new Map(runs.map((r) => [r.runId, r]));

/** A StepStarted's prediction: the agent's calls take about `tokens` of KEY's window. */
function prediction(tokens: number): Prediction {
  return {
    action: 0,
    keyId: KEY,
    dimension: "tokens",
    limit: 6_000,
    remaining: 0,
    needed: tokens,
    resetAtMs: 0,
    estimatedInputTokens: tokens,
    estimatedOutputTokens: 0,
    estimatedTotalTokens: tokens,
    sigma: 0,
    k: 0,
    waitedMs: 0,
    resumeAtMs: 0,
    exactInput: false,
  } as Prediction;
}

/** KEY's window as last read: `left` of 6,000 tokens, refilling 100 a second (known to refill evenly). */
function windowsWith(left: number): KeyWindows {
  const windows = new KeyWindows(undefined, () => "continuous");
  windows
    .of(KEY, "https://api.example")
    .observe({ tokens: { limit: 6_000, remaining: left, resetAtMs: NOW + (6_000 - left) * 10 } }, NOW, NOW);
  return windows;
}

const base = { link: worker, busy: new Set<string>(), caps: new CapBook(), nowMs: NOW };

describe("pick: the run a worker takes next", () => {
  it("takes runs that ran before first, then fresh ones in queue order", () => {
    const nextSteps = new NextSteps(new KeyWindows());
    const lists = [listOf(queued("again-1")), listOf(queued("fresh-1"), queued("fresh-2"))];
    expect(pick({ ...base, lists, nextSteps }).queued?.runId).toBe("again-1");
    expect(pick({ ...base, lists: [new Map(), lists[1]!], nextSteps }).queued?.runId).toBe("fresh-1");
  });

  it("passes over a held run, an agent or version the worker does not serve, and a run it still holds", () => {
    const nextSteps = new NextSteps(new KeyWindows());
    const lists = [
      listOf(
        queued("held", { held: true }),
        queued("other-agent", { agent: "billing" }),
        queued("other-version", { version: "2" }),
        queued("still-mine"),
        queued("free"),
      ),
    ];
    expect(pick({ ...base, busy: new Set(["still-mine"]), lists, nextSteps }).queued?.runId).toBe("free");
  });

  it("holds back a run whose lease could not be recorded until its time, and says when to look again", () => {
    const nextSteps = new NextSteps(new KeyWindows());
    const lists = [listOf(queued("later", { notBeforeMs: NOW + 1_000 }))];
    expect(pick({ ...base, lists, nextSteps })).toEqual({ retryAtMs: NOW + 1_000 });
    expect(pick({ ...base, lists, nextSteps, nowMs: NOW + 1_000 }).queued?.runId).toBe("later");
  });

  it("does not start an agent's run into a window that cannot take its next call; another agent's goes", () => {
    const nextSteps = new NextSteps(windowsWith(0));
    nextSteps.heard("research", prediction(1_000));
    const lists = [listOf(queued("research-1"), queued("triage-1", { agent: "triage" }))];
    expect(pick({ ...base, lists, nextSteps }).queued?.runId).toBe("triage-1");
    const waiting = pick({ ...base, lists: [listOf(queued("research-1"))], nextSteps });
    expect(waiting.queued).toBeUndefined();
    // 1,000 tokens at 100 a second: ten seconds (and a little after).
    expect(waiting.retryAtMs).toBeGreaterThanOrEqual(NOW + 10_000);
    expect(waiting.retryAtMs).toBeLessThan(NOW + 11_000);
  });

  it("starts it once the window has refilled enough, or when nothing is known of the agent's key", () => {
    const nextSteps = new NextSteps(windowsWith(0));
    nextSteps.heard("research", prediction(1_000));
    expect(
      pick({ ...base, lists: [listOf(queued("r"))], nextSteps, nowMs: NOW + 11_000 }).queued?.runId,
    ).toBe("r");
    expect(
      pick({ ...base, lists: [listOf(queued("r"))], nextSteps: new NextSteps(windowsWith(0)) }).queued?.runId,
    ).toBe("r");
  });

  it("follows the shape gateways read: a fixed window's run waits for its reset, not for a refill", () => {
    // As the scheduler learns it: a reading a gateway recorded, with the shape it had learnt.
    // 6,000 tokens, none left, whole again at NOW + 40 s.
    const windows = new KeyWindows();
    windows
      .of(KEY, "https://api.example")
      .learn({ tokens: { limit: 6_000, remaining: 0, resetAtMs: NOW + 40_000 } }, NOW, NOW, {
        tokens: "fixed",
      });
    const nextSteps = new NextSteps(windows);
    nextSteps.heard("research", prediction(1_000));
    const lists = [listOf(queued("research-1"))];
    // Refilling evenly, 1,000 would be back in under 7 s; a fixed window gives nothing back before its reset.
    const waiting = pick({ ...base, lists, nextSteps, nowMs: NOW + 10_000 });
    expect(waiting.queued).toBeUndefined();
    expect(waiting.retryAtMs).toBeGreaterThanOrEqual(NOW + 40_000);
    expect(pick({ ...base, lists, nextSteps, nowMs: NOW + 39_000 }).queued).toBeUndefined();
    expect(pick({ ...base, lists, nextSteps, nowMs: NOW + 40_100 }).queued?.runId).toBe("research-1");

    // The same reading of a window the gateway read as refilling evenly (150 a second): on by then.
    const refilling = new KeyWindows();
    refilling
      .of(KEY, "https://api.example")
      .learn({ tokens: { limit: 6_000, remaining: 0, resetAtMs: NOW + 40_000 } }, NOW, NOW, {
        tokens: "continuous",
      });
    const next = new NextSteps(refilling);
    next.heard("research", prediction(1_000));
    expect(pick({ ...base, lists, nextSteps: next, nowMs: NOW + 10_000 }).queued?.runId).toBe("research-1");
  });
});
