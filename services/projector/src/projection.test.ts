import { makeEnvelope, StepCompleted, StepFailed, UsageEstimate } from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { project } from "./projection.js";

const stored = (payload: Parameters<typeof makeEnvelope>[0]["payload"]) => ({
  envelope: makeEnvelope({
    id: "e1",
    runId: "r1",
    sequence: 2,
    timestampMs: 1_764_000_000_000,
    tag: "t",
    payload,
  }),
  streamSequence: 7,
});

describe("project, a step's cost", () => {
  it("counts a negative cost as 0, as the run's fold and the budgets do, and says what the log held", () => {
    const { step, raw } = project(
      stored({
        $case: "stepCompleted",
        value: StepCompleted.fromPartial({
          outcome: { stepId: "s1", cost: { known: true, nanoUsd: -5_000_000_500_000_000 } },
        }),
      }),
    );
    expect(step).toMatchObject({
      cost_usd: "0.000000000",
      cost_problem: "cost -5000000.5 USD is negative; counted as 0",
    });
    // The event as it came stays in the raw events.
    expect(JSON.parse(raw.payload).outcome.cost.nanoUsd).toBe(-5_000_000_500_000_000);
  });

  it("counts a known cost as it is and an unknown one as unknown, with no problem", () => {
    const known = project(
      stored({
        $case: "stepCompleted",
        value: StepCompleted.fromPartial({
          outcome: { stepId: "s1", cost: { known: true, nanoUsd: 1_500 } },
        }),
      }),
    );
    const unknown = project(
      stored({ $case: "stepCompleted", value: StepCompleted.fromPartial({ outcome: { stepId: "s1" } }) }),
    );
    expect(known.step).toMatchObject({ cost_usd: "0.000001500", cost_problem: "" });
    expect(unknown.step).toMatchObject({ cost_usd: null, cost_problem: "" });
  });
});

describe("project, a step charged from Holdfast's estimate", () => {
  it("carries why its usage is estimated and what was wrong with the provider's", () => {
    const { step } = project(
      stored({
        $case: "stepCompleted",
        value: StepCompleted.fromPartial({
          outcome: {
            stepId: "s1",
            cost: { known: true, nanoUsd: 1_500 },
            estimated: true,
            usageEstimate: UsageEstimate.USAGE_ESTIMATE_INVALID,
            usageProblem: "output_tokens -5 is negative",
          },
        }),
      }),
    );
    expect(step).toMatchObject({
      estimated: true,
      usage_estimate: "invalid",
      usage_problem: "output_tokens -5 is negative",
      unknown_price: false,
      cost_usd: "0.000001500",
    });
  });

  it("counts a step charged at the unknown rate as estimated", () => {
    const { step } = project(
      stored({
        $case: "stepFailed",
        value: StepFailed.fromPartial({
          outcome: { stepId: "s1", cost: { known: true, nanoUsd: 75_000 }, unknownPrice: true },
        }),
      }),
    );
    expect(step).toMatchObject({ estimated: true, usage_estimate: "", unknown_price: true });
  });

  it("reads an estimated step from before the reason was recorded as lost with its gateway", () => {
    const { step } = project(
      stored({
        $case: "stepCompleted",
        value: StepCompleted.fromPartial({ outcome: { stepId: "s1", estimated: true } }),
      }),
    );
    expect(step).toMatchObject({ estimated: true, usage_estimate: "gateway_lost" });
  });
});
