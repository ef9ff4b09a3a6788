import { foldRun, type RunState, UsageEstimate } from "@holdfast/events";
import { createPricer, NO_USAGE, readChatUsage, type UsageReport } from "@holdfast/providers";
import { describe, expect, it } from "vitest";
import { type MeterInput, meterOutcome } from "./meter.js";

// A step's usage and cost from what its answer said: the provider's report when it can be
// used, Holdfast's estimate when it cannot, the unknown rate where a limit must count it.

const pricer = createPricer({ overrides: { priced: { input_per_mtok: 1, output_per_mtok: 2 } } });
const reported = (input: number, output: number): UsageReport => ({
  ...NO_USAGE,
  reported: true,
  inputTokens: input,
  outputTokens: output,
});

/** A run whose finished calls made 300 output tokens on average. */
const RUN: RunState = {
  ...foldRun("r", []),
  completed: 2,
  totals: { ...foldRun("r", []).totals, outputTokens: 600 },
};

function input(extra: Partial<MeterInput>): MeterInput {
  return {
    model: "priced",
    provider: undefined,
    usage: reported(1_000, 100),
    answered: "whole",
    estimatedInputTokens: 1_200,
    seenOutputTokens: 40,
    run: RUN,
    costControlled: () => {
      throw new Error("asked whether a limit applies, for a model with a price");
    },
    ...extra,
  };
}

describe("meterOutcome", () => {
  it("given a whole answer and a usable report, then the step is the report priced", () => {
    expect(meterOutcome(input({}), pricer)).toEqual({
      usage: reported(1_000, 100),
      cost: { known: true, nanoUsd: 1_000 * 1_000 + 100 * 2_000 },
      estimated: false,
      usageEstimate: UsageEstimate.USAGE_ESTIMATE_UNSPECIFIED,
      usageProblem: "",
      unknownPrice: false,
    });
  });

  it("given a report with a fraction, then it is priced rounded and the rounding is said", () => {
    const usage = readChatUsage({ prompt_tokens: 10, completion_tokens: 3.7 });
    expect(meterOutcome(input({ usage }), pricer)).toMatchObject({
      usage: { reported: true, outputTokens: 4 },
      estimated: false,
      usageProblem: "completion_tokens 3.7 is not a whole number: rounded to 4",
    });
  });

  it("given a whole answer whose report is unusable, then the input estimated and the run's usual output are charged, and why", () => {
    const usage = readChatUsage({ prompt_tokens: 10, completion_tokens: 2 ** 64 });
    const metered = meterOutcome(input({ usage }), pricer);
    expect(metered).toMatchObject({
      usage: { reported: false, inputTokens: 1_200, outputTokens: 300 },
      cost: { known: true, nanoUsd: 1_200 * 1_000 + 300 * 2_000 },
      estimated: true,
      usageEstimate: UsageEstimate.USAGE_ESTIMATE_INVALID,
    });
    expect(metered.usageProblem).toContain("completion_tokens 18446744073709552000 is more than 100000000");
  });

  it("given a whole answer without a report, of a run with no output yet, then what the answer carried stands for it", () => {
    expect(meterOutcome(input({ usage: NO_USAGE, run: undefined }), pricer)).toMatchObject({
      usage: { reported: false, inputTokens: 1_200, outputTokens: 40 },
      estimated: true,
      usageEstimate: UsageEstimate.USAGE_ESTIMATE_MISSING,
      usageProblem: "",
    });
  });

  it("given an answer cut off midway, then the provider's input stands and the output is what was relayed, at least", () => {
    expect(meterOutcome(input({ answered: "cut", usage: reported(900, 1) }), pricer)).toMatchObject({
      usage: { reported: false, inputTokens: 900, outputTokens: 40 },
      estimated: true,
      usageEstimate: UsageEstimate.USAGE_ESTIMATE_PARTIAL,
    });
    expect(meterOutcome(input({ answered: "cut", usage: NO_USAGE }), pricer).usage).toMatchObject({
      inputTokens: 1_200,
      outputTokens: 40,
    });
  });

  it("given an answer that could not be read, then it is charged from the estimate", () => {
    expect(meterOutcome(input({ answered: "unreadable", usage: NO_USAGE }), pricer)).toMatchObject({
      usage: { reported: false, inputTokens: 1_200, outputTokens: 300 },
      usageEstimate: UsageEstimate.USAGE_ESTIMATE_MISSING,
    });
  });

  it("given a refusal, then nothing is billed; given no answer, then the cost is unknown; given a lost outcome, then the reaper's estimate", () => {
    expect(meterOutcome(input({ answered: "refused" }), pricer)).toMatchObject({
      usage: NO_USAGE,
      cost: { known: true, nanoUsd: 0 },
      estimated: false,
    });
    expect(meterOutcome(input({ answered: "none", usage: NO_USAGE }), pricer)).toMatchObject({
      cost: { known: false, nanoUsd: 0 },
      estimated: false,
    });
    expect(meterOutcome(input({ answered: "lost", usage: NO_USAGE }), pricer)).toMatchObject({
      usage: { reported: false, inputTokens: 1_200, outputTokens: 300 },
      estimated: true,
      usageEstimate: UsageEstimate.USAGE_ESTIMATE_GATEWAY_LOST,
    });
  });

  it("given a model with no price under a cost limit or budget, then it is charged at the unknown rate, flagged", () => {
    expect(meterOutcome(input({ model: "nobody-prices-this", costControlled: () => true }), pricer)).toEqual({
      usage: reported(1_000, 100),
      cost: { known: true, nanoUsd: 1_100 * 75_000 },
      estimated: false,
      usageEstimate: UsageEstimate.USAGE_ESTIMATE_UNSPECIFIED,
      usageProblem: "",
      unknownPrice: true,
    });
  });

  it("given a model with no price under no limit or budget, then its cost stays unknown", () => {
    expect(
      meterOutcome(input({ model: "nobody-prices-this", costControlled: () => false }), pricer),
    ).toMatchObject({ cost: { known: false, nanoUsd: 0 }, unknownPrice: false });
  });
});
