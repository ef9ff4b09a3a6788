import { ActorKind, CompactionMode, LimitKind, RunAction, RunCompacted } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import type { EventPayload } from "../envelope.js";
import { decide, type RetryStep, type TripRun } from "./decide.js";
import { complete, given, held, history, NOW, operator, RUN, start, started } from "./spec.fixture.js";
import { foldRun, RunStatus } from "./state.js";

// Rate-limit prediction's part of the run, given/when/then: a checkpoint (a trip by the
// provider's window), its own resume, and retries after a 429 that slipped through.

const predictor = { kind: ActorKind.ACTOR_KIND_PREDICTOR, name: "predict" };
const prediction = {
  action: 3,
  keyId: "k1",
  dimension: "tokens",
  limit: 6_000,
  remaining: 200,
  needed: 2_000,
  resetAtMs: NOW + 40_000,
  estimatedInputTokens: 1_200,
  estimatedOutputTokens: 300,
  estimatedTotalTokens: 1_500,
  sigma: 150,
  k: 3,
  waitedMs: 0,
  resumeAtMs: NOW + 18_000,
  exactInput: true,
};
const trip: TripRun = {
  type: "TripRun",
  action: "hold",
  trip: {
    limit: LimitKind.LIMIT_KIND_RATE_LIMIT,
    limitValue: 6_000,
    spentValue: 2_000,
    budgetKey: "",
    period: "",
    crossedByStepId: "",
    callModel: "gpt-4o",
    prediction,
  },
};
const checkpointed: EventPayload = {
  $case: "runTripped",
  value: { trip: trip.trip, action: RunAction.RUN_ACTION_HOLD },
};
const resumeCheckpoint = { type: "ClearCheckpoint" as const, gateway: "gw-1#a" };
/** The outcome event of `stepId`, finished on a run where it is the only step. */
const completed = (stepId: string): EventPayload =>
  decide(complete(stepId), foldRun(RUN, history(started(stepId))), NOW)[0]!;
const retry = (attempt: number): RetryStep => ({
  type: "RetryStep",
  stepId: "s2",
  attempt,
  upstreamStatus: 429,
  retryAfterMs: 1_000,
  wastedInputTokens: 1_200,
  keyId: "k1",
});

describe("a rate-limit checkpoint", () => {
  it("holds the run with the prediction's figures", () => {
    given(started("s1"), completed("s1")).when(trip).then(checkpointed);
  });

  it("is cleared by the gateway's own event (not an operator's resume), and the run's window of limits goes on", () => {
    const { state } = given(started("s1"), checkpointed);
    const [cleared] = decide(resumeCheckpoint, state, NOW + 5_000);
    expect(cleared).toMatchObject({ $case: "checkpointCleared", value: { gateway: "gw-1#a" } });
    const after = foldRun(RUN, history(started("s1"), checkpointed, cleared!));
    expect(after.status).not.toBe(RunStatus.Held);
    expect(after.window.startedMs).toBe(state.window.startedMs);
    expect(after.lastResumedMs).toBe(state.lastResumedMs);
  });

  it("cleared as earlier versions wrote it (a RunResumed with checkpoint), reads the same", () => {
    const { state } = given(started("s1"), checkpointed);
    const legacy: EventPayload = {
      $case: "runResumed",
      value: {
        actor: predictor,
        reason: "the provider's window allows the call",
        selector: undefined,
        limits: undefined,
        overrides: false,
        checkpoint: true,
        compact: CompactionMode.COMPACTION_MODE_UNSPECIFIED,
      },
    };
    const after = foldRun(RUN, history(started("s1"), checkpointed, legacy));
    expect(after.status).not.toBe(RunStatus.Held);
    expect(after.window.startedMs).toBe(state.window.startedMs);
    expect(after.lastResumedMs).toBe(state.lastResumedMs);
  });

  it("is not resumed past an operator: held (or resumed) by someone since, its resume is nothing", () => {
    given(checkpointed, held).when(resumeCheckpoint).then();
    given(checkpointed, {
      $case: "runResumed",
      value: {
        actor: operator,
        reason: "",
        selector: undefined,
        limits: undefined,
        overrides: false,
        checkpoint: false,
        compact: CompactionMode.COMPACTION_MODE_UNSPECIFIED,
      },
    })
      .when(resumeCheckpoint)
      .then();
  });

  it("an operator may resume a checkpointed run at once (a new window, as any resume)", () => {
    const { state } = given(checkpointed);
    expect(
      decide({ type: "ResumeRun", actor: operator, reason: "", onlyIfHeld: false }, state, NOW)[0],
    ).toMatchObject({ $case: "runResumed", value: { checkpoint: false } });
  });
});

describe("a retry after a 429", () => {
  it("is recorded once per attempt on the open step, and counts what it re-sent as waste", () => {
    const { state } = given(started("s1"), started("s2"));
    const [event] = decide(retry(2), state, NOW);
    expect(event).toMatchObject({
      $case: "stepRetried",
      value: { stepId: "s2", attempt: 2, upstreamStatus: 429 },
    });
    const after = foldRun(RUN, history(started("s1"), started("s2"), event!));
    expect(after.totals).toMatchObject({ retries: 1, wastedInputTokens: 1_200 });
    // The same retry again (a re-sent command) records nothing.
    expect(decide(retry(2), after, NOW)).toEqual([]);
    expect(decide(retry(3), after, NOW)[0]?.$case).toBe("stepRetried");
  });

  it("records nothing for a step already finished", () => {
    given(started("s2"), completed("s2")).when(retry(2)).then();
  });

  it("leaves the step in flight: its outcome finishes it as usual", () => {
    const { state } = given(started("s2"));
    const [event] = decide(retry(2), state, NOW);
    const after = foldRun(RUN, history(started("s2"), event!));
    expect(after.open.has("s2")).toBe(true);
    expect(decide(start("s3"), after, NOW)[0]?.$case).toBe("stepStarted");
  });
});

describe("a compaction of the run's conversation", () => {
  const compaction = (prefixMessages: number) =>
    RunCompacted.fromPartial({
      mode: CompactionMode.COMPACTION_MODE_TRUNCATE,
      why: "operator",
      prefixHash: `h${prefixMessages}`,
      prefixMessages,
      replacementJson: "[]",
    });
  const compacted = (prefixMessages: number): EventPayload => ({
    $case: "runCompacted",
    value: compaction(prefixMessages),
  });
  const resumedCompacting: EventPayload = {
    $case: "runResumed",
    value: {
      actor: operator,
      reason: "",
      selector: undefined,
      limits: undefined,
      overrides: false,
      checkpoint: false,
      compact: CompactionMode.COMPACTION_MODE_TRUNCATE,
    },
  };

  it("is asked for by a resume, and done by the next call: the ask is then over", () => {
    expect(given(started("s1"), completed("s1"), resumedCompacting).state.compactNext).toBe(
      CompactionMode.COMPACTION_MODE_TRUNCATE,
    );
    given(started("s1"), completed("s1"), resumedCompacting)
      .when({ type: "CompactRun", compaction: compaction(4) })
      .then(compacted(4));
    const after = given(started("s1"), completed("s1"), resumedCompacting, compacted(4)).state;
    expect(after.compactNext).toBe(CompactionMode.COMPACTION_MODE_UNSPECIFIED);
    expect(after.compactions.map((c) => c.prefixMessages)).toEqual([4]);
  });

  it("is recorded once when its write is retried, and one that dropped nothing replaces nothing", () => {
    given(compacted(4))
      .when({ type: "CompactRun", compaction: compaction(4) })
      .then();
    expect(
      given(compacted(4), compacted(0), compacted(2)).state.compactions.map((c) => c.prefixMessages),
    ).toEqual([4, 2]);
  });
});
