import { ActorKind, Api, CompactionMode, LimitKind, RunAction, UnparkReason } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import type { EventPayload } from "../envelope.js";
import { RunBusyError, RunHeldError, RunStoppedError } from "../errors.js";
import { emptySelector, type HoldRule } from "../fleet/rules.js";
import { type ConfiguredLimits, NO_LIMITS } from "./admission.js";
import { decide } from "./decide.js";
import {
  complete,
  given,
  held,
  history,
  NOW,
  observed,
  operator,
  RUN,
  start,
  started,
  stopped,
} from "./spec.fixture.js";
import { foldRun, RunStatus, tokensInLastMinute } from "./state.js";
import { describeRun } from "./view.js";

// Limits, holds, resumes, stops, parked calls and standing rules, given/when/then.

const limits = (l: Partial<ConfiguredLimits>): ConfiguredLimits => ({ ...NO_LIMITS, ...l });
const resumed = (
  extra: Partial<Extract<EventPayload, { $case: "runResumed" }>["value"]> = {},
): EventPayload => ({
  $case: "runResumed",
  value: {
    actor: operator,
    reason: "",
    selector: undefined,
    limits: undefined,
    overrides: false,
    checkpoint: false,
    compact: CompactionMode.COMPACTION_MODE_UNSPECIFIED,
    ...extra,
  },
});
const completedStep = (stepId: string, nanoUsd: number) =>
  decide(complete(stepId, observed([10, 5], nanoUsd)), foldRun(RUN, history(started(stepId))), NOW)[0]!;

describe("limits, checked before a call starts", () => {
  it("given max_steps steps in the window, when another starts, then the run trips instead of starting", () => {
    given(started("s1"), completedStep("s1", 100), started("s2"), completedStep("s2", 100))
      .when(start("s3", { limits: limits({ maxSteps: 2 }) }))
      .then({
        $case: "runTripped",
        value: {
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
          action: RunAction.RUN_ACTION_HOLD,
        },
      });
  });

  it("trips max_cost on what the window's calls cost, and names the step that crossed it", () => {
    const { state } = given(started("s1"), completedStep("s1", 1_100));
    expect(decide(start("s2", { limits: limits({ maxCostNanoUsd: 1_100 }) }), state, NOW)[0]).toMatchObject({
      $case: "runTripped",
      value: {
        trip: {
          limit: LimitKind.LIMIT_KIND_COST,
          limitValue: 1_100,
          spentValue: 1_100,
          crossedByStepId: "s1",
        },
      },
    });
    // Under it by a nano-dollar, with nothing in flight, the call starts: it may be the one that crosses.
    expect(decide(start("s2", { limits: limits({ maxCostNanoUsd: 1_101 }) }), state, NOW)[0]?.$case).toBe(
      "stepStarted",
    );
  });

  it("near max_cost, makes a call wait while calls in flight have reserved what is left, never trips on it", () => {
    // 600 spent by s1, 500 reserved by s2 in flight; s3 reserves 100 (start()'s default).
    const { state } = given(started("s1"), completedStep("s1", 600), {
      $case: "stepStarted",
      value: { ...(started("s2").value as object), reservedNanoUsd: 500 } as never,
    });
    expect(() => decide(start("s3", { limits: limits({ maxCostNanoUsd: 1_150 }) }), state, NOW)).toThrow(
      RunBusyError,
    );
    expect(decide(start("s3", { limits: limits({ maxCostNanoUsd: 1_200 }) }), state, NOW)[0]?.$case).toBe(
      "stepStarted",
    );
    // Once s2 has finished, s3 may start (and be the one that crosses).
    const after = given(started("s1"), completedStep("s1", 600), started("s2"), completedStep("s2", 500));
    expect(
      decide(start("s3", { limits: limits({ maxCostNanoUsd: 1_150 }) }), after.state, NOW)[0]?.$case,
    ).toBe("stepStarted");
  });

  it("stops rather than holds when on_trip says stop", () => {
    const [decision] = decide(
      start("s2", { limits: limits({ maxSteps: 1, onTrip: "stop" }) }),
      foldRun(RUN, history(started("s1"))),
      NOW,
    );
    expect(decision).toMatchObject({ $case: "runTripped", value: { action: RunAction.RUN_ACTION_STOP } });
  });

  it("trips max_minutes by the caller's clock, from the window's start", () => {
    const { state } = given(started("s1"));
    const limit = limits({ maxMinutes: 10 });
    expect(decide(start("s2", { limits: limit }), state, NOW + 9 * 60_000)[0]?.$case).toBe("stepStarted");
    expect(decide(start("s2", { limits: limit }), state, NOW + 10 * 60_000)[0]).toMatchObject({
      $case: "runTripped",
      value: { trip: { limit: LimitKind.LIMIT_KIND_MINUTES, limitValue: 600_000 } },
    });
  });

  it("trips max_tokens_per_minute on the tokens of the last minute only", () => {
    const { state } = given(started("s1"), completedStep("s1", 100)); // 15 tokens at NOW + 10 ms
    const limit = limits({ maxTokensPerMinute: 15 });
    expect(decide(start("s2", { limits: limit }), state, NOW + 30_000)[0]?.$case).toBe("runTripped");
    expect(decide(start("s2", { limits: limit }), state, NOW + 61_000)[0]?.$case).toBe("stepStarted");
  });

  it("keeps the last minute's tokens in one entry a second, however fast a run's steps finish", () => {
    // 3,000 calls, one finishing every 20 ms: a minute's worth, 15 tokens each.
    const payloads: EventPayload[] = [];
    for (let i = 0; i < 3_000; i++) payloads.push(started(`s${i}`), completedStep(`s${i}`, 100));
    const state = foldRun(RUN, history(...payloads));
    expect(state.recentTokens.length).toBeLessThanOrEqual(61);
    const lastMs = NOW + (payloads.length - 1) * 10;
    // Completions are the odd events, at NOW + (2i + 1) * 10 ms.
    const inMinute = Array.from({ length: 3_000 }, (_, i) => NOW + (2 * i + 1) * 10).filter(
      (ms) => ms > lastMs - 60_000,
    ).length;
    // Counted for as long as the second's latest step is: never less, at most one second's (50 steps) more.
    expect(tokensInLastMinute(state, lastMs)).toBeGreaterThanOrEqual(15 * inMinute);
    expect(tokensInLastMinute(state, lastMs)).toBeLessThanOrEqual(15 * (inMinute + 50));
    expect(tokensInLastMinute(state, lastMs + 61_000)).toBe(0);
  });

  it("a resume starts a new window with its own limits, over the configured ones", () => {
    const base = [started("s1"), completedStep("s1", 100), started("s2"), completedStep("s2", 100)];
    // The configured limit is crossed…
    expect(
      decide(start("s3", { limits: limits({ maxSteps: 2 }) }), foldRun(RUN, history(...base)), NOW)[0]?.$case,
    ).toBe("runTripped");
    // …and a resume's window of 5 steps lets the call start, counting from the resume.
    const window = { maxSteps: 5, maxCostNanoUsd: 0, maxMinutes: 0, maxTokensPerMinute: 0 };
    const { state } = given(...base, held, resumed({ limits: window, overrides: true }));
    expect(state.window).toMatchObject({ steps: 0, costNanoUsd: 0, overrides: true });
    expect(decide(start("s3", { limits: limits({ maxSteps: 2 }) }), state, NOW)[0]?.$case).toBe(
      "stepStarted",
    );
  });
});

describe("holds, resumes and stops", () => {
  it("given a held run, a call cannot start (park it); given a stopped one, it is refused", () => {
    expect(() => decide(start("s2"), foldRun(RUN, history(started("s1"), held)), NOW)).toThrow(RunHeldError);
    expect(() => decide(start("s2"), foldRun(RUN, history(started("s1"), stopped)), NOW)).toThrow(
      RunStoppedError,
    );
  });

  it("holding a held run, or stopping a stopped one, appends nothing", () => {
    given(started("s1"), held).when({ type: "HoldRun", actor: operator, reason: "again" }).then();
    given(started("s1"), stopped).when({ type: "StopRun", actor: operator, reason: "again" }).then();
  });

  it("keeps a hold through the outcome of a call that was in flight", () => {
    const { state } = given(started("s1"), held, completedStep("s1", 100));
    expect(state.status).toBe(RunStatus.Held);
    expect(state.open.size).toBe(0);
  });

  it("a resume by selector leaves a run that is not held alone; by id it gives it a new window", () => {
    given(started("s1"))
      .when({
        type: "ResumeRun",
        actor: operator,
        reason: "",
        onlyIfHeld: true,
        selector: { ...emptySelector(), all: true },
      })
      .then();
    const [event] = decide(
      { type: "ResumeRun", actor: operator, reason: "fresh", onlyIfHeld: false },
      foldRun(RUN, history(started("s1"))),
      NOW,
    );
    expect(event?.$case).toBe("runResumed");
  });

  it("a stopped run can be resumed, and its calls start again", () => {
    const { state } = given(started("s1"), stopped, resumed());
    // s1 is still in flight: the run is running again.
    expect(state.status).toBe(RunStatus.Running);
    expect(state.hold).toBeNull();
    expect(decide(start("s2"), state, NOW)[0]?.$case).toBe("stepStarted");
  });
});

describe("parked calls", () => {
  const park = {
    type: "ParkCall" as const,
    parkId: "p1",
    api: Api.API_OPENAI_CHAT_COMPLETIONS,
    model: "m",
    stream: true,
    gateway: "gw#1",
  };

  it("parks only on a held run, once; unparks once", () => {
    given(started("s1")).when(park).then();
    const { state } = given(started("s1"), held);
    const [parked] = decide(park, state, NOW);
    expect(parked?.$case).toBe("callParked");
    const after = given(started("s1"), held, parked!);
    expect(after.state.parked.size).toBe(1);
    after.when(park).then();
    const unpark = {
      type: "UnparkCall" as const,
      parkId: "p1",
      how: UnparkReason.UNPARK_REASON_CLIENT_GONE,
      parkedMs: 5,
    };
    const [left] = decide(unpark, after.state, NOW);
    expect(left?.$case).toBe("callUnparked");
    const gone = given(started("s1"), held, parked!, left!);
    expect(gone.state.parked.size).toBe(0);
    gone.when(unpark).then();
  });
});

describe("standing hold rules", () => {
  const rule = (ruleId: string, addedMs: number, selector = { ...emptySelector(), tag: "t" }): HoldRule => ({
    ruleId,
    selector,
    addedMs,
    actor: operator,
    reason: "freeze prod",
  });

  it("hold a run they match at its next call, before it starts: the gateway's own event, not an operator's", () => {
    given(started("s1"))
      .when(start("s2", { rules: [rule("r1", NOW)] }))
      .then({
        $case: "runHeldByRule",
        value: { ruleId: "r1", reason: "freeze prod", selector: { ...emptySelector(), tag: "t" } },
      });
  });

  it("hold a run at a call that is no step (a passed-through path): by its tag, though it never called before", () => {
    given()
      .when({ type: "HoldByRule", rules: [rule("r1", NOW)], tag: "t" })
      .then({
        $case: "runHeldByRule",
        value: { ruleId: "r1", reason: "freeze prod", selector: { ...emptySelector(), tag: "t" } },
      });
    given()
      .when({ type: "HoldByRule", rules: [rule("r1", NOW)], tag: "other" })
      .then();
    given(started("s1"), held)
      .when({ type: "HoldByRule", rules: [rule("r1", NOW)], tag: "t" })
      .then();
    given(started("s1"), stopped)
      .when({ type: "HoldByRule", rules: [rule("r1", NOW)], tag: "t" })
      .then();
  });

  it("hold no call that is no step by a rule on a model: it names none", () => {
    const byModel = rule("r2", NOW, { ...emptySelector(), modelPrefix: "gpt-4o" });
    given(started("s1"))
      .when({ type: "HoldByRule", rules: [byModel], tag: "t" })
      .then();
  });

  it("say the rule held the run, in the fold and in show, as a RunHeld naming the rule once did", () => {
    const byRule = given(started("s1"), {
      $case: "runHeldByRule",
      value: { ruleId: "r1", reason: "freeze prod", selector: { ...emptySelector(), tag: "t" } },
    }).state;
    const legacy = given(started("s1"), {
      $case: "runHeld",
      value: {
        actor: { kind: ActorKind.ACTOR_KIND_RULE, name: "r1" },
        reason: "freeze prod",
        selector: { ...emptySelector(), tag: "t" },
        ruleId: "r1",
      },
    }).state;
    for (const state of [byRule, legacy]) {
      expect(state.status).toBe(RunStatus.Held);
      expect(state.hold).toMatchObject({
        kind: "rule",
        ruleId: "r1",
        reason: "freeze prod",
        actor: { kind: ActorKind.ACTOR_KIND_RULE, name: "r1" },
      });
    }
  });

  it("hold a new run at its first call, by what the call says (tag, model, prompt)", () => {
    const byModel = rule("r2", NOW, { ...emptySelector(), modelPrefix: "gpt-4o" });
    expect(decide(start("s1", { rules: [byModel] }), foldRun("fresh", []), NOW)[0]?.$case).toBe(
      "runHeldByRule",
    );
    const byPrompt = rule("r3", NOW, { ...emptySelector(), promptHash: "abc" });
    expect(decide(start("s1", { rules: [byPrompt] }), foldRun("fresh", []), NOW)[0]?.$case).toBe(
      "runHeldByRule",
    );
    const other = rule("r4", NOW, { ...emptySelector(), tag: "dev" });
    expect(decide(start("s1", { rules: [other], tag: "prod" }), foldRun("fresh", []), NOW)[0]?.$case).toBe(
      "stepStarted",
    );
  });

  it("leave alone a run resumed after the rule was added: the operator spoke after it", () => {
    const { state } = given(started("s1"), held, resumed());
    // The resume landed at NOW + 20 ms; a rule from before it does not hold the run…
    expect(decide(start("s2", { rules: [rule("r1", NOW)] }), state, NOW)[0]?.$case).toBe("stepStarted");
    // …one added after it does.
    expect(decide(start("s2", { rules: [rule("r1", NOW + 1_000)] }), state, NOW)[0]?.$case).toBe(
      "runHeldByRule",
    );
  });
});

describe("describeRun, for show", () => {
  it("lists trips, holds, resumes, stops and parked calls in order, with the figures", () => {
    const trip = decide(
      start("s2", { limits: limits({ maxSteps: 1 }) }),
      foldRun(RUN, history(started("s1"))),
      NOW,
    )[0]!;
    const view = describeRun(RUN, history(started("s1"), trip, resumed({ reason: "carry on" }), stopped));
    expect(view.control.map((c) => [c.what, c.actor, c.reason, c.trip?.limit ?? null])).toEqual([
      ["tripped", "limit", "", "steps"],
      ["resumed", "operator (control token)", "carry on", null],
      ["stopped", "operator (control token)", "enough", null],
    ]);
    expect(view.status).toBe("stopped");
    expect(view.hold).toMatchObject({ kind: "operator", action: "stop", reason: "enough" });
  });
});
