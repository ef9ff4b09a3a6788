import { Api, FailureReason, StepCompleted, StepFailed, UsageEstimate } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import { decodeEnvelope, encodeEnvelope, makeEnvelope, type StoredEnvelope } from "../envelope.js";
import { decide } from "./decide.js";
import {
  apply,
  complete,
  fail,
  given,
  history,
  identity,
  NOW,
  observed,
  RUN,
  start,
  started,
} from "./spec.fixture.js";
import { evolve, foldRun, initialState, RunStatus } from "./state.js";
import { describeRun } from "./view.js";

// The run as a decider, specified given/when/then: given these events, when this
// command, then these events (and this state).

describe("StartStep", () => {
  it("given a new run, when a step starts, then it is step 1 with what the call said", () => {
    given()
      .when(start("s1"))
      .then({
        $case: "stepStarted",
        value: {
          stepId: "s1",
          step: 1,
          api: Api.API_OPENAI_CHAT_COMPLETIONS,
          model: "gpt-4o-mini",
          stream: false,
          identity,
          messageCount: 2,
          upstream: "http://127.0.0.1:1",
          gateway: "gw-1#a",
          estimatedInputTokens: 12,
          promptHash: "abc123",
          reservedNanoUsd: 100,
          budgetLeases: [],
          prediction: undefined,
          route: undefined,
          origin: undefined,
        },
      });
  });

  it("given two steps started, when another starts, then it is step 3", () => {
    const { state } = apply(initialState(RUN), start("s1"), start("s2"));
    expect(decide(start("s3"), state, NOW)).toMatchObject([{ value: { step: 3 } }]);
  });

  it("given the step is already in flight, when it is started again (a retry), then nothing is appended", () => {
    const { state } = apply(initialState(RUN), start("s1"));
    expect(decide(start("s1"), state, NOW)).toEqual([]);
  });
});

describe("CompleteStep and FailStep", () => {
  it("given a step in flight, when it completes, then the outcome carries the step's number, api and stream", () => {
    const { state } = apply(initialState(RUN), start("s1", { stream: true }));
    expect(decide(complete("s1"), state, NOW)).toEqual([
      {
        $case: "stepCompleted",
        value: StepCompleted.fromPartial({
          outcome: {
            stepId: "s1",
            step: 1,
            api: Api.API_OPENAI_CHAT_COMPLETIONS,
            stream: true,
            ...observed([10, 5], 700),
          },
          finishReason: "stop",
          toolCalls: [],
        }),
      },
    ]);
  });

  it("given a step that has finished, when its outcome is recorded again (a retry after the dedupe window), then nothing is appended", () => {
    const { state } = apply(initialState(RUN), start("s1"), complete("s1"));
    expect(decide(complete("s1"), state, NOW)).toEqual([]);
    expect(decide(fail("s1"), state, NOW)).toEqual([]);
  });

  it("given no such step, when an outcome arrives, then nothing is appended", () => {
    given().when(complete("ghost")).then();
  });

  it("given a step in flight, when it fails, then the failure keeps the provider's type, code and message", () => {
    const { state, events } = apply(initialState(RUN), start("s1"), fail("s1"));
    expect(events[1]).toEqual({
      $case: "stepFailed",
      value: StepFailed.fromPartial({
        outcome: {
          stepId: "s1",
          step: 1,
          api: Api.API_OPENAI_CHAT_COMPLETIONS,
          stream: false,
          ...observed([0, 0], 0),
          upstreamStatus: 429,
        },
        reason: FailureReason.FAILURE_REASON_UPSTREAM_STATUS,
        errorType: "rate_limit_error",
        errorCode: "rate_limit_exceeded",
        errorMessage: "slow down",
      }),
    });
    expect(state).toMatchObject({ failed: 1, completed: 0, status: RunStatus.Idle });
  });

  it("given an outcome without a model, then the step's requested model stands", () => {
    const { events } = apply(
      initialState(RUN),
      start("s1"),
      complete("s1", observed([1, 1], 1, { model: "" })),
    );
    expect(events[1]).toMatchObject({ value: { outcome: { model: "gpt-4o-mini" } } });
  });
});

describe("evolve", () => {
  it("given calls in flight and finished, then status, counts and totals follow, unknown costs counted apart", () => {
    let { state } = apply(initialState(RUN), start("s1"), start("s2"));
    expect(state).toMatchObject({ status: RunStatus.Running, started: 2 });
    expect(state.open.size).toBe(2);
    ({ state } = apply(
      state,
      complete("s1", observed([100, 20], 1_500)),
      complete("s2", observed([50, 5], null, { estimated: true })),
    ));
    expect(state).toMatchObject({
      status: RunStatus.Idle,
      completed: 2,
      totals: { inputTokens: 150, outputTokens: 25, costNanoUsd: 1_500, unpricedSteps: 1, estimatedSteps: 1 },
    });
    expect(state.open.size).toBe(0);
  });

  it("given an event already folded (a redelivery), then nothing changes", () => {
    const events = history(started("s1"));
    const once = foldRun(RUN, events);
    expect(evolve(once, events[0]!)).toBe(once);
  });

  it("given an event whose sequence jumps past the next (a gap in the log), then it is not applied and the run's next event still is", () => {
    const { events } = apply(initialState(RUN), start("s1"), complete("s1"));
    const [first, second] = history(...events);
    const jumped = { ...history(started("s2"))[0]!, id: "forged", sequence: 1_000 };
    const state = foldRun(RUN, [first!, jumped, second!]);
    expect(state).toMatchObject({ lastSequence: 2, started: 1, completed: 1 });
    expect(state.open.size).toBe(0);
    // Its next decision numbers the run's own next event, not one after the forged sequence.
    expect(decide(start("s2"), state, NOW)).toMatchObject([{ value: { step: 2 } }]);
  });

  it("costs the same per event whatever the run's length: only calls in flight are kept", () => {
    let state = initialState(RUN);
    for (let i = 0; i < 20_000; i++) ({ state } = apply(state, start(`s${i}`), complete(`s${i}`)));
    expect(state).toMatchObject({ started: 20_000, completed: 20_000, lastSequence: 40_000 });
    expect(state.open.size).toBe(0);
    expect(Object.keys(state)).not.toContain("steps");
  });

  it("given an event type this version does not know, then it takes its place in the sequence and is counted", () => {
    const unknown: StoredEnvelope = {
      id: "e2",
      type: "RunHeld",
      schemaVersion: 1,
      runId: RUN,
      sequence: 2,
      timestampMs: NOW,
      tag: "",
      tenant: "",
      payload: undefined,
      unknown: "type",
    };
    const state = foldRun(RUN, [...history(started("s1")), unknown]);
    expect(state).toMatchObject({ lastSequence: 2, unknownEvents: 1, started: 1 });
    // The next decision numbers the next event after it.
    expect(decide(start("s2"), state, NOW)).toMatchObject([{ value: { step: 2 } }]);
  });
});

describe("schema versions", () => {
  it("reads a version 1 StepCompleted (fields flat) as version 2 (fields in outcome)", () => {
    const v1 = {
      ...makeEnvelope({
        id: "e2",
        runId: RUN,
        sequence: 2,
        timestampMs: NOW,
        tag: "",
        payload: { $case: "stepCompleted", value: StepCompleted.fromPartial({}) },
      }),
      schemaVersion: 1,
      payload: {
        $case: "stepCompleted" as const,
        value: StepCompleted.fromPartial({
          stepId: "s1",
          step: 1,
          api: Api.API_OPENAI_CHAT_COMPLETIONS,
          model: "m",
          upstreamStatus: 200,
          usage: { reported: true, inputTokens: 7, outputTokens: 3 },
          cost: { known: true, nanoUsd: 9 },
          latencyMs: 5,
          firstByteMs: 2,
          finishReason: "stop",
          toolCalls: ["t"],
          stream: true,
        }),
      },
    };
    const read = decodeEnvelope(encodeEnvelope(v1));
    expect(read.schemaVersion).toBe(2);
    expect(read.payload).toMatchObject({
      value: {
        finishReason: "stop",
        toolCalls: ["t"],
        outcome: {
          stepId: "s1",
          step: 1,
          model: "m",
          upstreamStatus: 200,
          latencyMs: 5,
          firstByteMs: 2,
          stream: true,
          usage: { inputTokens: 7 },
          cost: { nanoUsd: 9 },
          estimated: false,
        },
      },
    });
    const state = foldRun(RUN, [...history(started("s1")), read]);
    expect(state).toMatchObject({ completed: 1, totals: { inputTokens: 7, costNanoUsd: 9 } });
  });

  it("skips a later version of a known type instead of half-reading it", () => {
    const later = { ...history(started("s1"))[0]!, schemaVersion: 99 };
    expect(decodeEnvelope(encodeEnvelope(later))).toMatchObject({
      payload: undefined,
      unknown: "version",
      type: "StepStarted",
    });
  });
});

describe("describeRun", () => {
  it("lists what the read set aside and each event that is not the run's next, and folds the rest", () => {
    const { events } = apply(initialState(RUN), start("s1"), complete("s1"), start("s2"));
    const [a, b, c] = history(...events);
    const jumped = { ...a!, id: "forged", sequence: 1_000 };
    const repeated = { ...a!, id: "again", sequence: 1 };
    const garbage = new Uint8Array([0xff, 0xff, 0xff]);
    const view = describeRun(RUN, {
      events: [
        { envelope: a!, streamSequence: 10 },
        { envelope: jumped, streamSequence: 12 },
        { envelope: b!, streamSequence: 13 },
        { envelope: repeated, streamSequence: 14 },
        { envelope: c!, streamSequence: 15 },
      ],
      quarantined: [
        {
          streamSequence: 11,
          subject: `hf.run.${RUN}.StepCompleted`,
          runId: RUN,
          type: "StepCompleted",
          reason: "undecodable",
          detail: "event is not a valid protobuf Envelope: index out of range",
          data: garbage,
        },
      ],
    });
    expect(view).toMatchObject({ lastSequence: 3, completed: 1, inFlight: 1 });
    expect(view.steps.map((step) => [step.step, step.status])).toEqual([
      [1, "completed"],
      [2, "in_flight"],
    ]);
    expect(view.quarantined).toEqual([
      {
        streamSequence: 11,
        sequence: 0,
        type: "StepCompleted",
        reason: "undecodable",
        detail: "event is not a valid protobuf Envelope: index out of range",
        bytes: 3,
        preview: "ffffff",
      },
      expect.objectContaining({
        streamSequence: 12,
        sequence: 1_000,
        type: "StepStarted",
        reason: "out_of_sequence",
        detail: "run sequence 1000 where 2 was next",
      }),
      expect.objectContaining({
        streamSequence: 14,
        sequence: 1,
        reason: "out_of_sequence",
        detail: "run sequence 1 repeats one the run already has (its last is 2)",
      }),
    ]);
  });

  it("lists every step in order with names for people", () => {
    const events: StoredEnvelope[] = [];
    let state = initialState(RUN);
    for (const command of [start("s1"), complete("s1"), start("s2"), fail("s2")]) {
      for (const payload of decide(command, state, NOW)) {
        const envelope = makeEnvelope({
          id: `x${state.lastSequence + 1}`,
          runId: RUN,
          sequence: state.lastSequence + 1,
          timestampMs: NOW,
          tag: "prod",
          payload,
        });
        events.push(envelope);
        state = evolve(state, envelope);
      }
    }
    const view = describeRun(RUN, events);
    expect(view).toMatchObject({
      status: "idle",
      tag: "prod",
      completed: 1,
      failed: 1,
      inFlight: 0,
      identifiedBy: { source: "header" },
    });
    expect(view.steps.map((s) => [s.step, s.status, s.api, s.failure?.reason ?? null, s.responseId])).toEqual(
      [
        [1, "completed", "openai_chat_completions", null, "chatcmpl-1"],
        [2, "failed", "openai_chat_completions", "upstream_status", "chatcmpl-1"],
      ],
    );
  });
});

describe("costs and usage Holdfast estimated", () => {
  const MAX = Number.MAX_SAFE_INTEGER;
  const capped = (stepId: string) =>
    start(stepId, {
      limits: { maxCostNanoUsd: 1_000, maxSteps: 0, maxMinutes: 0, maxTokensPerMinute: 0, onTrip: "hold" },
    });

  it("given two steps at the saturated cost, then the run's cost and window stay at it, and a trip on it is an event every reader decodes", () => {
    const { state } = apply(
      initialState(RUN),
      start("s1"),
      complete("s1", observed([10, 5], MAX)),
      start("s2"),
      complete("s2", observed([10, 5], MAX)),
    );
    expect(state.totals.costNanoUsd).toBe(MAX);
    expect(state.window.costNanoUsd).toBe(MAX);
    const [tripped] = decide(capped("s3"), state, NOW);
    expect(tripped).toMatchObject({ $case: "runTripped", value: { trip: { spentValue: MAX } } });
    const envelope = makeEnvelope({
      id: "t",
      runId: RUN,
      sequence: 9,
      timestampMs: NOW,
      tag: "t",
      payload: tripped!,
    });
    expect(decodeEnvelope(encodeEnvelope(envelope)).payload).toEqual(tripped);
  });

  it("given an outcome a writer got wrong with a negative cost, then it counts as nothing, never against the limit", () => {
    const { state } = apply(
      initialState(RUN),
      capped("s1"),
      complete("s1", observed([10, 5], 900)),
      capped("s2"),
      complete("s2", observed([10, 5], -5_000)),
    );
    expect(state.window.costNanoUsd).toBe(900);
    expect(state.totals.costNanoUsd).toBe(900);
  });

  it("given an outcome charged from Holdfast's estimate, then the event says why and what was wrong, and show says it too", () => {
    const outcome = observed([12, 30], 500, {
      usage: { ...observed([12, 30], 0).usage, reported: false },
      estimated: true,
      usageEstimate: UsageEstimate.USAGE_ESTIMATE_INVALID,
      usageProblem: "completion_tokens -5 is negative",
    });
    const { state, events } = apply(initialState(RUN), start("s1"), complete("s1", outcome));
    expect(events[1]).toMatchObject({
      value: {
        outcome: {
          estimated: true,
          usageEstimate: UsageEstimate.USAGE_ESTIMATE_INVALID,
          usageProblem: "completion_tokens -5 is negative",
          unknownPrice: false,
        },
      },
    });
    expect(state.totals.estimatedSteps).toBe(1);
    const view = describeRun(RUN, history(...events));
    expect(view.steps[0]).toMatchObject({
      estimated: true,
      usageReported: false,
      usageEstimate: "invalid",
      usageProblem: "completion_tokens -5 is negative",
      unknownPrice: false,
      costNanoUsd: 500,
    });
  });

  it("given an outcome charged at the unknown rate, then its cost counts, and it is an estimated step, not an unpriced one", () => {
    const { state, events } = apply(
      initialState(RUN),
      start("s1"),
      complete("s1", observed([100, 20], 9_000_000, { unknownPrice: true })),
    );
    expect(state.totals).toMatchObject({ costNanoUsd: 9_000_000, unpricedSteps: 0, estimatedSteps: 1 });
    expect(describeRun(RUN, history(...events)).steps[0]).toMatchObject({
      estimated: false,
      usageEstimate: "",
      unknownPrice: true,
    });
  });

  it("given an estimated outcome written before the reason was, then show says its gateway was lost", () => {
    const events = [
      started("s1"),
      decide(
        complete("s1", observed([12, 0], 10, { estimated: true })),
        apply(initialState(RUN), start("s1")).state,
        NOW,
      )[0]!,
    ];
    expect(describeRun(RUN, history(...events)).steps[0]).toMatchObject({
      estimated: true,
      usageEstimate: "gateway_lost",
    });
  });
});
