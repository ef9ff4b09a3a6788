import { Api, FailureReason, RunSource } from "@holdfast/proto";
import { beforeEach, describe, expect, it } from "vitest";
import { type DecodedEnvelope, type EventPayload, makeEnvelope } from "../envelope.js";
import { evolve, foldRun, initialState } from "./state.js";

const RUN = "agent-7";
let clock = 1_000;
let seq = 0;
function event(payload: EventPayload, tag = ""): DecodedEnvelope {
  seq += 1;
  clock += 10;
  return makeEnvelope({
    id: `e${seq}`,
    runId: RUN,
    sequence: seq,
    timestampMs: clock,
    tag,
    payload,
  }) as DecodedEnvelope;
}
function started(stepId: string, step: number, model = "gpt-4o-mini"): EventPayload {
  return {
    $case: "stepStarted",
    value: {
      stepId,
      step,
      api: Api.API_OPENAI_CHAT_COMPLETIONS,
      model,
      stream: false,
      identity: {
        source: RunSource.RUN_SOURCE_HEADER,
        key: "x-holdfast-run",
        fingerprint: "",
        generation: 0,
      },
      messageCount: 2,
      upstream: "http://127.0.0.1:1",
      gateway: "gw-1",
    },
  };
}
function completed(stepId: string, step: number, tokens: [number, number, number], nanoUsd: number | null) {
  return {
    $case: "stepCompleted" as const,
    value: {
      stepId,
      step,
      api: Api.API_OPENAI_CHAT_COMPLETIONS,
      model: "gpt-4o-mini-2024-07-18",
      upstreamStatus: 200,
      usage: {
        reported: true,
        inputTokens: tokens[0],
        outputTokens: tokens[1],
        cachedInputTokens: tokens[2],
      },
      cost: { known: nanoUsd !== null, nanoUsd: nanoUsd ?? 0 },
      latencyMs: 120,
      firstByteMs: 40,
      finishReason: "stop",
      toolCalls: [],
      stream: false,
    },
  };
}
function failed(stepId: string, step: number, reason: FailureReason, status: number): EventPayload {
  return {
    $case: "stepFailed",
    value: {
      stepId,
      step,
      api: Api.API_OPENAI_CHAT_COMPLETIONS,
      model: "gpt-4o-mini",
      upstreamStatus: status,
      reason,
      errorType: "rate_limit_exceeded",
      errorCode: "rate_limit_exceeded",
      errorMessage: "Rate limit reached",
      usage: { reported: false, inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 },
      cost: { known: status !== 0, nanoUsd: 0 },
      latencyMs: 5,
      firstByteMs: 5,
      stream: false,
    },
  };
}

describe("run fold", () => {
  beforeEach(() => {
    seq = 0;
    clock = 1_000;
  });

  it("given no events, the run is new and empty", () => {
    const state = initialState(RUN);
    expect(state).toMatchObject({ runId: RUN, status: "new", lastSequence: 0, steps: [], inFlight: 0 });
  });

  it("given a started step, the run is running with the call in flight", () => {
    const state = foldRun(RUN, [event(started("s1", 1), "prod")]);
    expect(state.status).toBe("running");
    expect(state.inFlight).toBe(1);
    expect(state.tag).toBe("prod");
    expect(state.identifiedBy).toEqual({
      source: "header",
      key: "x-holdfast-run",
      fingerprint: "",
      generation: 0,
    });
    expect(state.steps[0]).toMatchObject({
      step: 1,
      status: "in_flight",
      model: "gpt-4o-mini",
      api: "openai_chat_completions",
    });
  });

  it("when the step completes, its usage and cost land on the step and in the totals", () => {
    const state = foldRun(RUN, [event(started("s1", 1)), event(completed("s1", 1, [100, 20, 64], 4_500))]);
    expect(state.status).toBe("idle");
    expect(state.completed).toBe(1);
    expect(state.model).toBe("gpt-4o-mini-2024-07-18");
    expect(state.steps[0]).toMatchObject({
      status: "completed",
      upstreamStatus: 200,
      inputTokens: 100,
      outputTokens: 20,
      cachedInputTokens: 64,
      costNanoUsd: 4_500,
      latencyMs: 120,
      finishReason: "stop",
    });
    expect(state.totals).toEqual({
      inputTokens: 100,
      outputTokens: 20,
      cachedInputTokens: 64,
      costNanoUsd: 4_500,
      unpricedSteps: 0,
    });
  });

  it("keeps an unknown cost unknown instead of counting it as free", () => {
    const state = foldRun(RUN, [
      event(started("s1", 1, "mystery")),
      event(completed("s1", 1, [10, 5, 0], null)),
    ]);
    expect(state.steps[0]?.costNanoUsd).toBeNull();
    expect(state.totals.unpricedSteps).toBe(1);
    expect(state.totals.costNanoUsd).toBe(0);
  });

  it("when a step fails, the reason and upstream status are kept", () => {
    const state = foldRun(RUN, [
      event(started("s1", 1)),
      event(failed("s1", 1, FailureReason.FAILURE_REASON_UPSTREAM_STATUS, 429)),
    ]);
    expect(state.failed).toBe(1);
    expect(state.steps[0]?.failure).toEqual({
      reason: "upstream_status",
      errorType: "rate_limit_exceeded",
      errorCode: "rate_limit_exceeded",
      message: "Rate limit reached",
    });
    expect(state.steps[0]?.upstreamStatus).toBe(429);
  });

  it("keeps concurrent steps of one run apart and finishes each on its own outcome", () => {
    const state = foldRun(RUN, [
      event(started("s1", 1)),
      event(started("s2", 2)),
      event(completed("s2", 2, [1, 1, 0], 1)),
    ]);
    expect(state.status).toBe("running");
    expect(state.steps.map((s) => [s.step, s.status])).toEqual([
      [1, "in_flight"],
      [2, "completed"],
    ]);
  });

  it("folding a redelivered event changes nothing (idempotent)", () => {
    const first = event(started("s1", 1));
    const done = event(completed("s1", 1, [100, 20, 0], 7));
    const once = foldRun(RUN, [first, done]);
    const twice = evolve(evolve(once, first), done);
    expect(twice).toEqual(once);
  });

  it("ignores an outcome for a step it never saw start", () => {
    const state = foldRun(RUN, [event(completed("ghost", 9, [1, 1, 1], 1))]);
    expect(state.steps).toEqual([]);
    expect(state.totals.inputTokens).toBe(0);
    expect(state.lastSequence).toBe(1);
  });
});
