import { type Actor, ActorKind, createIdGenerator, type RunCommand, type RunState } from "@holdfast/events";
import { createLogger } from "@holdfast/log";
import { Ledger, runAggregate } from "@holdfast/runs";
import { waitFor } from "@holdfast/test-harness";
import type OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// Limits and budgets are checked before a call is forwarded, on every gateway, without a
// round trip per call: per-run limits by the run's decider (under its sequence check),
// budgets across runs by slices leased from the budget service.
const MODEL = "gpt-4o"; // $2.50 / M input, $10 / M output
const TEAM_DAILY_USD = 0.002;
const RUN_LIMIT_USD = 0.02;
let stack: Stack;
let runs: Ledger<RunState, RunCommand>;
let closeOperator: () => Promise<void>;
const operator: Actor = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "test" };

beforeAll(async () => {
  stack = await startStack({
    config: {
      hold: { keepalive_ms: 1_000 },
      budgets: { team: { daily_usd: TEAM_DAILY_USD } },
      limits_by_tag: { capped: { max_cost_usd: RUN_LIMIT_USD } },
    },
  });
  // An operator's commands, appended as the control service appends them.
  const bus = await stack.connect("control");
  runs = new Ledger({
    aggregate: runAggregate,
    bus,
    log: createLogger({ name: "operator", level: "silent" }),
    clock: Date.now,
    newId: createIdGenerator(),
  });
  closeOperator = () => bus.close();
});
afterAll(async () => {
  await closeOperator?.();
  await stack?.close();
});

const ask = (client: OpenAI, content = "hello there") =>
  client.chat.completions.create({ model: MODEL, max_tokens: 40, messages: [{ role: "user", content }] });

const heldOrStopped = (runId: string) =>
  waitFor(
    async () => {
      const run = await stack.run(runId);
      return run.status === "held" || run.status === "stopped" ? run : undefined;
    },
    { timeoutMs: 10_000, message: `${runId} was never held` },
  );

describe("a daily budget across runs", () => {
  it("holds every run of the tag before the call that would exceed it, across two runs and two gateways", async () => {
    const other = await stack.extraGateway({});
    const a = stack.client({ headers: { "X-Holdfast-Run": "team-a", "X-Holdfast-Tag": "team" } });
    const b = other.client({ "X-Holdfast-Run": "team-b", "X-Holdfast-Tag": "team" });
    // Calls alternate between the two runs (and gateways) until one is held.
    let answered = 0;
    const pending: Promise<unknown>[] = [];
    for (let i = 0; i < 60; i++) {
      const client = i % 2 === 0 ? a : b;
      const call = ask(client);
      const winner = await Promise.race([
        call.then(() => "answered"),
        new Promise((r) => setTimeout(() => r("parked"), 1_500)),
      ]);
      if (winner === "parked") {
        pending.push(call.catch(() => undefined));
        break;
      }
      answered += 1;
    }
    expect(answered).toBeGreaterThan(3);
    const held = await heldOrStopped(answered % 2 === 0 ? "team-a" : "team-b");
    expect(held.hold).toMatchObject({
      kind: "trip",
      trip: { limit: "daily_budget", budgetKey: "team", limitValue: TEAM_DAILY_USD * 1e9 },
    });
    expect(held.hold?.trip?.period).toMatch(/^\d{4}-\d{2}-\d{2}$/);

    // What the team spent never passed its budget by more than the calls in flight could.
    const spent = async () =>
      (await stack.run("team-a")).totals.costNanoUsd + (await stack.run("team-b")).totals.costNanoUsd;
    await waitFor(
      async () =>
        (await stack.run("team-a")).inFlight + (await stack.run("team-b")).inFlight === 0 ? true : undefined,
      {
        timeoutMs: 10_000,
      },
    );
    expect(await spent()).toBeLessThanOrEqual(TEAM_DAILY_USD * 1e9);

    // The other run of the team is held at its next call too.
    const nextId = answered % 2 === 0 ? "team-b" : "team-a";
    const next = ask(answered % 2 === 0 ? b : a).catch(() => undefined);
    const alsoHeld = await heldOrStopped(nextId);
    expect(alsoHeld.hold?.trip?.limit).toBe("daily_budget");

    // An operator who resumes with limits of the run's own exempts it from the budget for that window.
    await runs.execute(
      nextId,
      { tag: "", tenant: "" },
      {
        type: "ResumeRun",
        actor: operator,
        reason: "this one matters",
        onlyIfHeld: false,
        limits: { maxSteps: 50, maxCostNanoUsd: 0, maxMinutes: 0, maxTokensPerMinute: 0 },
      },
    );
    await next;
    expect((await stack.settled(nextId, (await stack.run(nextId)).steps.length)).status).toBe("idle");
    // The first run stays held until an operator says otherwise: stopped, its parked call gets a 409.
    await runs.execute(
      held.runId,
      { tag: "", tenant: "" },
      { type: "StopRun", actor: operator, reason: "over budget" },
    );
    await Promise.all(pending);
  });
});

describe("a per-run cost limit under concurrent calls on two gateways", () => {
  it("is crossed by at most the one call that crossed it, with 8 calls at a time on two gateways", async () => {
    const other = await stack.extraGateway({});
    const clients = [
      stack.client({ headers: { "X-Holdfast-Run": "capped-run", "X-Holdfast-Tag": "capped" } }),
      other.client({ "X-Holdfast-Run": "capped-run", "X-Holdfast-Tag": "capped" }),
    ];
    // Waves of 8 concurrent calls, 4 on each gateway, until the run trips.
    const parked: Promise<unknown>[] = [];
    for (let wave = 0; wave < 30 && parked.length === 0; wave++) {
      // Each wave's answers are longer than the last, and no max_tokens is set: the
      // reservations (the run's average output so far) fall short, the worst case for a limit.
      const words = "lighthouse ".repeat(1 + wave * 12);
      const calls = Array.from({ length: 8 }, (_, i) =>
        clients[i % 2]!.chat.completions.create({
          model: MODEL,
          messages: [{ role: "user", content: `wave ${wave} call ${i}: ${words}` }],
        }),
      );
      const settled = await Promise.all(
        calls.map((call) =>
          Promise.race([
            call.then(() => "answered"),
            new Promise((r) => setTimeout(() => r("parked"), 2_000)),
          ]),
        ),
      );
      settled.forEach((result, i) => {
        if (result === "parked") parked.push(calls[i]!.catch(() => undefined));
      });
    }
    expect(parked.length).toBeGreaterThan(0);
    const run = await waitFor(
      async () => {
        const state = await stack.run("capped-run");
        return state.status === "held" && state.inFlight === 0 ? state : undefined;
      },
      { timeoutMs: 15_000, message: "the capped run never tripped and settled" },
    );
    expect(run.hold?.trip?.limit).toBe("cost");
    const limit = RUN_LIMIT_USD * 1e9;
    const overshoot = Math.max(0, run.totals.costNanoUsd - limit);
    const perCall = Math.max(...run.steps.map((s) => s.costNanoUsd ?? 0));
    console.info(
      `capped-run: limit $${RUN_LIMIT_USD}, spent $${(run.totals.costNanoUsd / 1e9).toFixed(6)}, overshoot $${(overshoot / 1e9).toFixed(6)} (${(overshoot / perCall).toFixed(2)} calls), ${run.steps.length} steps`,
    );
    // Near the limit the run's calls start one at a time, so it crosses by at most the one
    // call that crossed it, whatever the concurrency and however many gateways.
    expect(overshoot).toBeLessThanOrEqual(perCall);
    expect(run.hold?.trip?.spentValue).toBe(run.totals.costNanoUsd);
    await runs.execute(
      "capped-run",
      { tag: "", tenant: "" },
      {
        type: "StopRun",
        actor: operator,
        reason: "done",
      },
    );
    await Promise.all(parked);
  });
});
