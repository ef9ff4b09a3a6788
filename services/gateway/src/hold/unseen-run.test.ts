import {
  decide,
  emptySelector,
  FLEET,
  type HoldRule,
  initialState,
  NO_LIMITS,
  type RunState,
  RunStatus,
  type StartStep,
} from "@holdfast/events";
import { describe, expect, it } from "vitest";
import type { Call } from "../pipeline/hooks.js";
import { Admission } from "./admission.js";

const NOW = 1_764_000_000_000;

function admissionWith(rules: HoldRule[]) {
  const fleetState = { lastSequence: 1, rules: new Map(rules.map((r) => [r.ruleId, r])) };
  const fleet = {
    cached: (id: string) => (id === FLEET ? fleetState : undefined),
    latest: async () => fleetState,
  };
  return new Admission({
    ledger: { cached: () => undefined }, // this gateway has never served the run
    fleet,
    held: { uncertain: () => false, statusOf: () => undefined },
    pricer: {},
    limits: {
      limits: { max_cost_usd: 0, max_steps: 0, max_minutes: 0, max_tokens_per_minute: 0 },
      limits_by_tag: {},
      on_trip: "hold",
      budgets: {},
    },
    clock: () => NOW,
  } as never);
}

const rule = (selector: Partial<HoldRule["selector"]>): HoldRule => ({
  ruleId: "r1",
  selector: { ...emptySelector(), ...selector },
  addedMs: NOW - 60_000,
  actor: undefined,
  reason: "incident",
});

const call = (tag: string) =>
  ({
    run: { runId: "agent-7", tag, promptHash: "" },
    view: { model: "gpt-4o" },
    reservedNanoUsd: 0,
  }) as unknown as Call;

function start(tag: string, rules: HoldRule[]): StartStep {
  return {
    type: "StartStep",
    stepId: "s2",
    api: 1,
    model: "gpt-4o",
    stream: false,
    identity: undefined,
    messageCount: 1,
    upstream: "http://p",
    gateway: "gw#2",
    estimatedInputTokens: 1,
    promptHash: "",
    reservedNanoUsd: 0,
    budgetLeases: [],
    prediction: undefined,
    tag,
    limits: NO_LIMITS,
    rules,
  } as unknown as StartStep;
}

// The run as the log has it: another gateway has a call of it in flight, tagged prod by its first call.
const logState: RunState = {
  ...initialState("agent-7"),
  status: RunStatus.Running,
  tag: "prod",
  started: 1,
  open: new Map([["s1", { stepId: "s1" } as never]]),
};

describe("a run this gateway has no state of, at a standing rule the log would apply", () => {
  it.each([
    ["--status running", rule({ status: "running" }), "prod"],
    ["--tag prod, the call naming no tag", rule({ tag: "prod" }), ""],
  ])(
    "%s: the call is not sent before the log accepts its start, which the decider refuses",
    async (_name, r, callTag) => {
      const gate = await admissionWith([r]).gate(call(callTag));
      const events = decide(start(callTag, [r]), logState, NOW);
      expect(events.map((e) => e.$case)).toEqual(["runHeldByRule"]);
      // Agreement would be "confirm" (or "held"): never "go" for a start the log refuses.
      expect(gate).not.toBe("go");
    },
  );
});

describe("a run this gateway has no state of, whose resume set limits of its own", () => {
  it("is not sent before the log accepts its start, which the decider trips (no limit configured, the window's own spent)", async () => {
    const resumed: RunState = {
      ...initialState("agent-7"),
      status: RunStatus.Idle,
      started: 3,
      window: {
        ...initialState("agent-7").window,
        startedMs: NOW - 60_000,
        steps: 2,
        limits: { maxCostNanoUsd: 0, maxSteps: 2, maxMinutes: 0, maxTokensPerMinute: 0 } as never,
      },
    };
    const gate = await admissionWith([]).gate(call(""));
    const events = decide(start("", []), resumed, NOW);
    expect(events.map((e) => e.$case)).toEqual(["runTripped"]);
    expect(gate).not.toBe("go");
  });
});
