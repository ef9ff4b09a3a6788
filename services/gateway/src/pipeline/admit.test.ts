import type { RunCommand, StartStep, Trip } from "@holdfast/events";
import { LimitKind, type Prediction } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import { UnpricedModelError } from "../errors.js";
import { admit, MAX_REWRITES } from "./admit.js";
import { chatCall, upstreamAt } from "./call.fixture.js";
import type { PipelineDeps } from "./call.js";
import type { Ending } from "./finish.js";
import { type Amendment, type BeforeForward, CONTINUE, PipelineHooks } from "./hooks.js";
import type { Unparked, Waiting } from "./wait.js";

/** The pipeline's parts admit talks to: what it appended to the run, and how parked calls leave. */
function depsOf(parkings: Unparked[] = []) {
  const appended: RunCommand[] = [];
  let parked = 0;
  const waiting = {
    park: async () => {
      parked += 1;
      return parkings.shift() ?? "released";
    },
    pause: async () => "ready",
    waitForRoom: async () => "ready",
  } as unknown as Waiting;
  const deps = {
    ledger: {
      execute: async (_runId: string, _labels: unknown, command: RunCommand) => {
        appended.push(command);
        const events =
          command.type === "StartStep" ? [{ payload: { $case: "stepStarted", value: { step: 1 } } }] : [];
        return { events, state: { status: 1, open: new Map() } };
      },
    },
    instanceId: "gw#1",
    limitsFor: () => ({}),
    rules: () => [],
    onTrip: "hold",
    waiting,
    logConnected: () => true,
  } as unknown as PipelineDeps;
  return { deps, appended, parked: () => parked, hooks: new PipelineHooks(waiting) };
}

const PREDICTION = { action: 1, keyId: "k" } as unknown as Prediction;
const TRIP = { limit: LimitKind.LIMIT_KIND_RATE_LIMIT } as unknown as Trip;

describe("admit: features' amendments, applied in their order", () => {
  it("each feature sees the call as the ones before it amended it, and the start records their notes", async () => {
    const { deps, appended, hooks } = depsOf();
    const seen: string[] = [];
    const to = upstreamAt("http://target.test");
    const routing: BeforeForward = () => ({
      kind: "reroute",
      to: {
        upstream: to,
        model: "target-model",
        secrets: ["sk-target", "sk-client"],
        credentialHeaders: { authorization: "Bearer sk-target" },
        route: { choice: { alias: "alias" } as never, answerModel: "alias" },
      },
    });
    const pricing: BeforeForward = (call) => {
      seen.push(`pricing:${call.model}`);
      return {
        kind: "continue",
        notes: { reservation: { nanoUsd: 7, model: call.model, unpriced: false } },
      };
    };
    let compactions = 0;
    const compaction: BeforeForward = async (call) => {
      seen.push(`compaction:${(call.body.value.messages as unknown[]).length}`);
      if (compactions++ > 0) return { kind: "continue", notes: { prediction: PREDICTION } };
      // A rewrite asks the same feature again, for the body as it now is.
      return { kind: "rewrite", body: { ...call.body.value, messages: [{ role: "user", content: "x" }] } };
    };
    const budget: BeforeForward = () => ({ kind: "confirm", notes: { budgetLeases: ["lease-1"] } });
    hooks.beforeForward.push(routing, pricing, compaction, budget);
    const call = chatCall({
      model: "alias",
      messages: [
        { role: "user", content: "a" },
        { role: "user", content: "b" },
      ],
    });

    const admitted = await admit(call, hooks, deps);

    expect("started" in admitted).toBe(true);
    expect(seen).toEqual(["pricing:target-model", "compaction:2", "compaction:1"]);
    const start = appended.find((command): command is StartStep => command.type === "StartStep");
    expect(start).toMatchObject({
      model: "alias",
      upstream: "http://target.test",
      reservedNanoUsd: 7,
      budgetLeases: ["lease-1"],
      prediction: PREDICTION,
    });
    // The body is sent as amended (the target's model, compacted), made once however often it is read.
    expect(JSON.parse(call.upstreamBody.toString())).toEqual({
      model: "target-model",
      messages: [{ role: "user", content: "x" }],
    });
    expect(call.upstreamBody).toBe(call.upstreamBody);
    expect(call.estimatedInputTokens).toBe(Math.ceil(call.upstreamBody.length / 4));
  });

  it("a trip is recorded, the features after it are not asked, and the holds park the call; released, it is decided anew", async () => {
    const { deps, appended, hooks, parked } = depsOf(["released"]);
    const asked: string[] = [];
    let trips = 1;
    hooks.beforeForward.push(
      () => {
        asked.push("first");
        return CONTINUE;
      },
      (): Amendment => {
        asked.push("tripping");
        return trips-- > 0 ? { kind: "park", trip: TRIP } : CONTINUE;
      },
      () => {
        asked.push("after");
        return CONTINUE;
      },
    );
    let holds = 0;
    hooks.beforeStart.push(() => (holds++ === 0 ? { kind: "park" } : CONTINUE));

    const admitted = await admit(chatCall({ model: "m", messages: [] }), hooks, deps);

    expect("started" in admitted).toBe(true);
    expect(asked).toEqual(["first", "tripping", "first", "tripping", "after"]);
    expect(parked()).toBe(1);
    expect(appended.map((command) => command.type)).toEqual(["TripRun", "StartStep"]);
    expect(appended[0]).toMatchObject({ action: "hold" });
  });

  it("a feature that rewrites the body for ever is asked a bounded number of times, and the call goes on", async () => {
    const { deps, appended, hooks } = depsOf();
    let asked = 0;
    let after = 0;
    // A compaction whose result keeps matching what it compacts: each rewrite asks it again.
    hooks.beforeForward.push((call) => {
      asked += 1;
      const messages = (call.body.value as { messages: unknown[] }).messages;
      return { kind: "rewrite", body: { model: "gpt-4o", messages: messages.slice(1) } };
    });
    hooks.beforeForward.push(() => {
      after += 1;
      return CONTINUE;
    });
    const messages = Array.from({ length: 20 }, (_, i) => ({ role: "user", content: `turn ${i}` }));
    const call = chatCall({ model: "gpt-4o", messages });
    const admitted = await admit(call, hooks, deps);
    expect("started" in admitted).toBe(true);
    expect(asked).toBe(MAX_REWRITES + 1);
    expect(after).toBe(1);
    // The rewrites applied, and no more: the body sent is the fourth.
    expect(JSON.parse(call.upstreamBody.toString()).messages).toHaveLength(20 - MAX_REWRITES);
    expect(appended.map((c) => c.type)).toEqual(["StartStep"]);
  });

  it("a refusal ends the call before anything is appended, and no later feature is asked", async () => {
    const { deps, appended, hooks } = depsOf();
    const error = new UnpricedModelError("m");
    let later = 0;
    hooks.beforeForward.push(
      () => ({ kind: "refuse", error }),
      () => {
        later += 1;
        return CONTINUE;
      },
    );
    const ending = (await admit(chatCall({ model: "m", messages: [] }), hooks, deps)) as Ending;
    expect(ending).toEqual({ reply: { kind: "error", error } });
    expect(later).toBe(0);
    expect(appended).toEqual([]);
  });

  it("a call parked and then cancelled ends as its cancellation says, nothing appended", async () => {
    const { deps, appended, hooks } = depsOf(["shutdown"]);
    hooks.beforeStart.push(() => ({ kind: "park" }));
    const call = chatCall({ model: "m", messages: [] });
    call.cancel({ kind: "shutdown" });
    const ending = (await admit(call, hooks, deps)) as Ending;
    expect(ending.outcome).toBeUndefined();
    expect(ending.reply).toMatchObject({ kind: "error", error: { status: 503 } });
    expect(appended).toEqual([]);
  });

  it("a call cancelled by a shutdown while a feature waited is not started, even when the feature went on", async () => {
    const { deps, appended, hooks } = depsOf();
    const call = chatCall({ model: "m", messages: [] });
    hooks.beforeForward.push(() => {
      call.cancel({ kind: "shutdown" });
      return CONTINUE;
    });
    const ending = (await admit(call, hooks, deps)) as Ending;
    expect(ending.reply).toMatchObject({ kind: "error", error: { status: 503 } });
    expect(appended).toEqual([]);
  });
});
