import { CompactionMode, LimitKind } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import type { EventPayload } from "../envelope.js";
import { RunBusyError } from "../errors.js";
import { emptySelector, type HoldRule } from "../fleet/rules.js";
import { type ConfiguredLimits, headroom, NEAR_MINUTES_MS, NO_LIMITS, ruleHolding } from "./admission.js";
import { decide } from "./decide.js";
import { complete, given, history, NOW, observed, operator, RUN, start, started } from "./spec.fixture.js";
import { foldRun, initialState } from "./state.js";

// The one admission rule, as the run's decider and a gateway's local check both apply it:
// what a run's limits leave for its next call, and which standing rule holds it there.

const limits = (l: Partial<ConfiguredLimits>): ConfiguredLimits => ({ ...NO_LIMITS, ...l });
/** The next call: start()'s model, reserving 100 nano-USD unless told. */
const next = (reservedNanoUsd = 100) => ({ model: "gpt-4o-mini", reservedNanoUsd });
/** A finished step: 15 tokens (10 in, 5 out) and what it cost. */
const completedStep = (stepId: string, nanoUsd: number) =>
  decide(complete(stepId, observed([10, 5], nanoUsd)), foldRun(RUN, history(started(stepId))), NOW)[0]!;
/** A step in flight that reserved this much. */
const inFlight = (stepId: string, reservedNanoUsd: number): EventPayload => ({
  $case: "stepStarted",
  value: { ...(started(stepId).value as object), reservedNanoUsd } as never,
});
const MINUTE = 60_000;

describe("headroom: what a run's limits leave for its next call", () => {
  it("a run within its limits has room, and any run has room where no limit is configured", () => {
    const { state } = given(started("s1"), completedStep("s1", 100));
    const generous = limits({
      maxSteps: 10,
      maxCostNanoUsd: 10_000,
      maxMinutes: 60,
      maxTokensPerMinute: 1_000,
    });
    expect(headroom(generous, state, next(), NOW + 1_000)).toEqual({ kind: "room" });
    const busy = given(started("s1"), completedStep("s1", 5_000), inFlight("s2", 9_000)).state;
    expect(headroom(NO_LIMITS, busy, next(9_000), NOW + 600 * MINUTE)).toEqual({ kind: "room" });
  });

  it("max_steps: a call with steps to spare has room, the last step it allows is near, and past it the run trips", () => {
    const { state } = given(started("s1"), completedStep("s1", 100), started("s2"), completedStep("s2", 100));
    expect(headroom(limits({ maxSteps: 4 }), state, next(), NOW)).toEqual({ kind: "room" });
    // The third step is the last one: it starts, but a gateway confirms it first.
    expect(headroom(limits({ maxSteps: 3 }), state, next(), NOW)).toEqual({ kind: "near" });
    expect(headroom(limits({ maxSteps: 2 }), state, next(), NOW)).toEqual({
      kind: "crossed",
      trip: {
        limit: LimitKind.LIMIT_KIND_STEPS,
        limitValue: 2,
        spentValue: 2,
        budgetKey: "",
        period: "",
        crossedByStepId: "",
        callModel: "gpt-4o-mini",
        prediction: undefined,
      },
    });
  });

  it("max_steps counts the calls in flight: each may be followed by another before this one starts", () => {
    const { state } = given(started("s1"), started("s2"));
    // Two steps started, two in flight: 2 + 2 + this one.
    expect(headroom(limits({ maxSteps: 6 }), state, next(), NOW)).toEqual({ kind: "room" });
    expect(headroom(limits({ maxSteps: 5 }), state, next(), NOW)).toEqual({ kind: "near" });
  });

  it("max_cost: near within a call at the run's average, tripped on what its finished calls cost, naming the step that crossed it", () => {
    const { state } = given(started("s1"), completedStep("s1", 600));
    // 600 spent, 600 a call on average: one more call could take it to 1,200.
    expect(headroom(limits({ maxCostNanoUsd: 1_201 }), state, next(), NOW)).toEqual({ kind: "room" });
    expect(headroom(limits({ maxCostNanoUsd: 1_200 }), state, next(), NOW)).toEqual({ kind: "near" });
    expect(headroom(limits({ maxCostNanoUsd: 600 }), state, next(), NOW)).toMatchObject({
      kind: "crossed",
      trip: { limit: LimitKind.LIMIT_KIND_COST, limitValue: 600, spentValue: 600, crossedByStepId: "s1" },
    });
  });

  it("max_cost: busy while the calls in flight, with this one, have reserved more than is left", () => {
    // 600 spent by s1, 500 reserved by s2 in flight.
    const { state } = given(started("s1"), completedStep("s1", 600), inFlight("s2", 500));
    expect(headroom(limits({ maxCostNanoUsd: 2_000 }), state, next(100), NOW)).toEqual({ kind: "near" });
    expect(headroom(limits({ maxCostNanoUsd: 2_000 }), state, next(1_000), NOW)).toEqual({ kind: "busy" });
    // With nothing in flight the call starts, and may be the one that crosses the limit.
    const idle = given(started("s1"), completedStep("s1", 600)).state;
    expect(headroom(limits({ maxCostNanoUsd: 2_000 }), idle, next(1_900), NOW).kind).not.toBe("busy");
  });

  it("max_cost: busy by this call's own reservation, though no call has finished to give an average", () => {
    // The run's first calls: 600 of a 1,000 limit reserved in flight, and this call
    // reserves 600 more. The decider makes it wait; the gateway's copy of the rule had no
    // average to go by (none finished) and forwarded it, for the provider call to be dropped.
    const { state } = given(inFlight("s1", 600));
    expect(headroom(limits({ maxCostNanoUsd: 1_000 }), state, next(600), NOW)).toEqual({ kind: "busy" });
    expect(() =>
      decide(start("s2", { limits: limits({ maxCostNanoUsd: 1_000 }), reservedNanoUsd: 600 }), state, NOW),
    ).toThrow(RunBusyError);
    expect(headroom(limits({ maxCostNanoUsd: 1_300 }), state, next(600), NOW)).toEqual({ kind: "room" });
  });

  it("max_minutes: near within 30 s of the window's end by the clock given, tripped at it", () => {
    const { state } = given(started("s1"), completedStep("s1", 100)); // the window opened at NOW
    const tenMinutes = limits({ maxMinutes: 10 });
    const nearFrom = NOW + 10 * MINUTE - NEAR_MINUTES_MS;
    expect(headroom(tenMinutes, state, next(), nearFrom - 1)).toEqual({ kind: "room" });
    expect(headroom(tenMinutes, state, next(), nearFrom)).toEqual({ kind: "near" });
    expect(headroom(tenMinutes, state, next(), NOW + 10 * MINUTE)).toMatchObject({
      kind: "crossed",
      trip: { limit: LimitKind.LIMIT_KIND_MINUTES, limitValue: 10 * MINUTE, spentValue: 10 * MINUTE },
    });
  });

  it("max_minutes: a run with nothing recorded yet has no window open, and its first call has room", () => {
    // Its window opens with this call. The gateway's copy of the rule counted the minutes
    // from 1970 and had the call confirmed first; the decider never trips it.
    const fresh = initialState("fresh");
    expect(headroom(limits({ maxMinutes: 10 }), fresh, next(), NOW)).toEqual({ kind: "room" });
    expect(decide(start("s1", { limits: limits({ maxMinutes: 10 }) }), fresh, NOW)[0]?.$case).toBe(
      "stepStarted",
    );
  });

  it("max_tokens_per_minute: near within a call's average, tripped on the last minute's tokens only", () => {
    const { state } = given(started("s1"), completedStep("s1", 100)); // 15 tokens, 15 a call
    expect(headroom(limits({ maxTokensPerMinute: 31 }), state, next(), NOW + 30_000)).toEqual({
      kind: "room",
    });
    expect(headroom(limits({ maxTokensPerMinute: 30 }), state, next(), NOW + 30_000)).toEqual({
      kind: "near",
    });
    expect(headroom(limits({ maxTokensPerMinute: 15 }), state, next(), NOW + 30_000)).toMatchObject({
      kind: "crossed",
      trip: { limit: LimitKind.LIMIT_KIND_TOKENS_PER_MINUTE, limitValue: 15, spentValue: 15 },
    });
    // A minute later those tokens are gone; only the average call is left to count.
    expect(headroom(limits({ maxTokensPerMinute: 15 }), state, next(), NOW + 61_000)).toEqual({
      kind: "near",
    });
    expect(headroom(limits({ maxTokensPerMinute: 16 }), state, next(), NOW + 61_000)).toEqual({
      kind: "room",
    });
  });

  it("a resume's own limits win over the configured ones for its window", () => {
    const resumed: EventPayload = {
      $case: "runResumed",
      value: {
        actor: operator,
        reason: "",
        selector: undefined,
        limits: { maxSteps: 2, maxCostNanoUsd: 0, maxMinutes: 0, maxTokensPerMinute: 0 },
        overrides: true,
        checkpoint: false,
        compact: CompactionMode.COMPACTION_MODE_UNSPECIFIED,
      },
    };
    const { state } = given(
      started("s1"),
      completedStep("s1", 100),
      resumed,
      started("s2"),
      completedStep("s2", 100),
    );
    // One step in the new window: the configured 100 would leave room, the resume's 2 does not.
    expect(headroom(limits({ maxSteps: 100 }), state, next(), NOW)).toEqual({ kind: "near" });
    expect(headroom(limits({ maxSteps: 100 }), state, next(), NOW)).toEqual(
      headroom(limits({ maxSteps: 2 }), state, next(), NOW),
    );
  });

  it("is what the decider decides: room and near start the call, busy makes it wait, crossed trips the run", () => {
    const states = [
      initialState(RUN),
      given(started("s1")).state,
      given(inFlight("s1", 700)).state,
      given(started("s1"), completedStep("s1", 600)).state,
      given(started("s1"), completedStep("s1", 600), inFlight("s2", 500)).state,
      given(started("s1"), completedStep("s1", 900), started("s2"), completedStep("s2", 100)).state,
    ];
    const configured = [
      NO_LIMITS,
      limits({ maxSteps: 1 }),
      limits({ maxSteps: 2 }),
      limits({ maxSteps: 3 }),
      limits({ maxCostNanoUsd: 600 }),
      limits({ maxCostNanoUsd: 1_000 }),
      limits({ maxCostNanoUsd: 1_250 }),
      limits({ maxMinutes: 1 }),
      limits({ maxTokensPerMinute: 15 }),
      limits({ maxTokensPerMinute: 40 }),
      limits({ maxSteps: 5, maxCostNanoUsd: 5_000, maxMinutes: 5, maxTokensPerMinute: 100, onTrip: "stop" }),
    ];
    const kinds = new Set<string>();
    for (const state of states) {
      for (const limit of configured) {
        for (const reserved of [0, 100, 600]) {
          for (const nowMs of [NOW + 1_000, NOW + 45_000, NOW + 2 * MINUTE]) {
            const room = headroom(limit, state, next(reserved), nowMs);
            kinds.add(room.kind);
            const command = start("s9", { limits: limit, reservedNanoUsd: reserved });
            if (room.kind === "busy") {
              expect(() => decide(command, state, nowMs)).toThrow(RunBusyError);
              continue;
            }
            const [decided] = decide(command, state, nowMs);
            if (room.kind === "crossed") {
              expect(decided).toMatchObject({ $case: "runTripped", value: { trip: room.trip } });
            } else {
              expect(decided?.$case).toBe("stepStarted");
            }
          }
        }
      }
    }
    expect([...kinds].sort()).toEqual(["busy", "crossed", "near", "room"]);
  });
});

describe("ruleHolding: which standing rule holds a run at a call", () => {
  const rule = (ruleId: string, selector: Partial<HoldRule["selector"]>, addedMs = NOW): HoldRule => ({
    ruleId,
    selector: { ...emptySelector(), ...selector },
    addedMs,
    actor: operator,
    reason: "freeze",
  });
  // The call as start() makes it: run agent-7, tag t, model gpt-4o-mini, prompt abc123.
  const call = { runId: RUN, tag: "t", model: "gpt-4o-mini", promptHash: "abc123" };
  const running = given(started("s1")).state; // tagged t by its events

  it("matches by tag: the run's own once it has one, the call's while it has none", () => {
    expect(ruleHolding([rule("r1", { tag: "t" })], running, call)?.ruleId).toBe("r1");
    expect(ruleHolding([rule("r1", { tag: "prod" })], running, call)).toBeUndefined();
    // A call naming another tag is still the run's: its own tag is what a rule sees.
    expect(ruleHolding([rule("r1", { tag: "t" })], running, { ...call, tag: "prod" })?.ruleId).toBe("r1");
    // A run nothing is recorded of yet has only the call's tag.
    expect(ruleHolding([rule("r1", { tag: "prod" })], undefined, { ...call, tag: "prod" })?.ruleId).toBe(
      "r1",
    );
    expect(
      ruleHolding([rule("r1", { tag: "prod" })], initialState(RUN), { ...call, tag: "prod" })?.ruleId,
    ).toBe("r1");
    expect(ruleHolding([rule("r1", { tag: "prod" })], undefined, call)).toBeUndefined();
  });

  it("matches by model and by prompt, as prefixes; a call that is no step names neither", () => {
    expect(ruleHolding([rule("m", { modelPrefix: "gpt-4o" })], running, call)?.ruleId).toBe("m");
    expect(ruleHolding([rule("m", { modelPrefix: "claude" })], running, call)).toBeUndefined();
    expect(ruleHolding([rule("p", { promptHash: "abc1" })], running, call)?.ruleId).toBe("p");
    expect(ruleHolding([rule("p", { promptHash: "abd" })], running, call)).toBeUndefined();
    const passedThrough = { ...call, model: "", promptHash: "" };
    expect(ruleHolding([rule("m", { modelPrefix: "gpt-4o" })], running, passedThrough)).toBeUndefined();
    expect(ruleHolding([rule("p", { promptHash: "abc1" })], running, passedThrough)).toBeUndefined();
  });

  it("matches by run id glob, by the run's activity (idle before its first step), and all runs", () => {
    expect(ruleHolding([rule("g", { runGlob: "agent-*" })], running, call)?.ruleId).toBe("g");
    expect(ruleHolding([rule("g", { runGlob: "batch-*" })], running, call)).toBeUndefined();
    expect(ruleHolding([rule("s", { status: "running" })], running, call)?.ruleId).toBe("s");
    expect(ruleHolding([rule("s", { status: "idle" })], running, call)).toBeUndefined();
    expect(ruleHolding([rule("s", { status: "idle" })], undefined, call)?.ruleId).toBe("s");
    expect(ruleHolding([rule("s", { status: "idle" })], initialState(RUN), call)?.ruleId).toBe("s");
    const idle = given(started("s1"), completedStep("s1", 100)).state;
    expect(ruleHolding([rule("s", { status: "idle" })], idle, call)?.ruleId).toBe("s");
    expect(ruleHolding([rule("a", { all: true })], running, call)?.ruleId).toBe("a");
  });

  it("needs every field a rule sets to match", () => {
    expect(ruleHolding([rule("r", { tag: "t", modelPrefix: "gpt-4o" })], running, call)?.ruleId).toBe("r");
    expect(ruleHolding([rule("r", { tag: "t", modelPrefix: "claude" })], running, call)).toBeUndefined();
  });

  it("leaves alone a run resumed after the rule was added: the operator spoke after it", () => {
    const resumed: EventPayload = {
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
    };
    const { state } = given(started("s1"), resumed); // resumed at NOW + 10 ms
    expect(ruleHolding([rule("old", { all: true }, NOW + 10)], state, call)).toBeUndefined();
    expect(ruleHolding([rule("new", { all: true }, NOW + 11)], state, call)?.ruleId).toBe("new");
  });

  it("gives the first rule that matches, in the order given, and none of no rules", () => {
    const rules = [
      rule("r1", { tag: "prod" }),
      rule("r2", { modelPrefix: "gpt" }),
      rule("r3", { all: true }),
    ];
    expect(ruleHolding(rules, running, call)?.ruleId).toBe("r2");
    expect(ruleHolding(new Map(rules.map((r) => [r.ruleId, r])).values(), running, call)?.ruleId).toBe("r2");
    expect(ruleHolding([], running, call)).toBeUndefined();
  });
});
