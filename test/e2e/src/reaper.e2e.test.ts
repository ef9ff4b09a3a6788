import { Api, createIdGenerator, makeEnvelope, RunSource } from "@holdfast/events";
import { createPricer } from "@holdfast/providers";
import { waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// A gateway killed mid-call never appends the call's outcome. Every live gateway watches
// the others' heartbeats and finishes such orphans with a StepFailed, exactly once.
let stack: Stack;
const HEARTBEAT_MS = 200;
beforeAll(async () => {
  stack = await startStack({ config: { gateway: { heartbeat_ms: HEARTBEAT_MS } } });
  // A second gateway on the same log, so two reapers race for the same orphans.
  await stack.extraGateway({ heartbeat_ms: HEARTBEAT_MS });
});
afterAll(async () => {
  await stack?.close();
});

/** Appends a StepStarted as a gateway that then died would have left it. */
async function orphan(runId: string, step: number, previousStreamSeq: number): Promise<number> {
  const envelope = makeEnvelope({
    id: createIdGenerator()(),
    runId,
    sequence: step,
    timestampMs: Date.now(),
    tag: "crash",
    payload: {
      $case: "stepStarted",
      value: {
        stepId: `${runId}-step-${step}`,
        step,
        api: Api.API_OPENAI_CHAT_COMPLETIONS,
        model: "gpt-4o-mini",
        stream: true,
        identity: {
          source: RunSource.RUN_SOURCE_HEADER,
          key: "X-Holdfast-Run",
          fingerprint: "",
          generation: 0,
        },
        estimatedInputTokens: 40,
        promptHash: "",
        reservedNanoUsd: 0,
        budgetLeases: [],
        prediction: undefined,
        route: undefined,
        origin: undefined,
        messageCount: 1,
        upstream: stack.provider.url,
        gateway: "gateway-that-died#0badc0",
      },
    },
  });
  return (await stack.bus.append(envelope, previousStreamSeq)).streamSequence;
}

describe("calls left in flight by a dead gateway", () => {
  it("are marked failed exactly once, while a live gateway's call in flight is left alone", async () => {
    // A live call, held mid-stream by the provider: its gateway is beating.
    const live = await stack
      .client({ headers: { "X-Holdfast-Run": "live-call", "x-fake-pause-after": "2" } })
      .chat.completions.create({
        model: "gpt-4o-mini",
        stream: true,
        messages: [{ role: "user", content: "hold on" }],
      });
    const iterator = live[Symbol.asyncIterator]();
    await iterator.next();

    const seq = await orphan("crashed-run", 1, 0);
    await orphan("crashed-run", 2, seq);

    const reaped = await waitFor(
      async () => {
        const run = await stack.run("crashed-run");
        return run.inFlight === 0 ? run : undefined;
      },
      { timeoutMs: 5_000, message: "orphaned calls were never marked failed" },
    );
    // Charged from what the start recorded (40 input tokens estimated from the request,
    // no output known yet), priced, and marked estimated: an orphan is never free.
    const estimate = createPricer().price({
      model: "gpt-4o-mini",
      usage: {
        reported: true,
        inputTokens: 40,
        outputTokens: 0,
        cachedInputTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
      },
    });
    expect(estimate.known && estimate.nanoUsd > 0).toBe(true);
    expect(
      reaped.steps.map((s) => [
        s.step,
        s.status,
        s.failure?.reason,
        s.inputTokens,
        s.costNanoUsd,
        s.estimated,
      ]),
    ).toEqual([
      [1, "failed", "gateway_error", 40, estimate.nanoUsd, true],
      [2, "failed", "gateway_error", 40, estimate.nanoUsd, true],
    ]);
    expect(reaped.totals).toMatchObject({ estimatedSteps: 2, costNanoUsd: 2 * estimate.nanoUsd });
    expect(reaped.steps[0]?.failure?.message).toContain("gateway-that-died#0badc0");

    // Several more reaper passes (of both gateways) change nothing.
    await new Promise((resolve) => setTimeout(resolve, HEARTBEAT_MS * 3 * 3));
    const events = (await stack.bus.readRun("crashed-run")).events;
    expect(events.map((e) => e.envelope.type)).toEqual([
      "StepStarted",
      "StepStarted",
      "StepFailed",
      "StepFailed",
    ]);

    // The live call was never touched, and finishes normally.
    expect((await stack.run("live-call")).steps[0]?.status).toBe("in_flight");
    stack.provider.resumePaused();
    while (!(await iterator.next()).done) {
      // drain
    }
    expect((await stack.settled("live-call", 1)).steps[0]?.status).toBe("completed");
  });
});
