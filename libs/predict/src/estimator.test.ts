import { describe, expect, it } from "vitest";
import { type CallFeatures, ESTIMATOR_DEFAULTS, Estimator } from "./estimator.js";
import { FeatureEstimator } from "./features.js";
import { encodingOf, TokenCounter } from "./tokens.js";

const call = (over: Partial<CallFeatures> = {}): CallFeatures => ({
  runId: "run-1",
  model: "gpt-4o-mini",
  tag: "",
  countedInput: 1_000,
  exact: false,
  maxOutput: undefined,
  toolCount: 0,
  messageCount: 3,
  ...over,
});

describe("Estimator (agentpause's rule, per run and model)", () => {
  it("starts from the count and a default output, with a quarter of the estimate as σ", () => {
    const estimate = new Estimator().estimate(call());
    expect(estimate).toMatchObject({ input: 1_000, output: 1_024, total: 2_024, sigma: 506, k: 3 });
    expect(estimate.need).toBe(2_024 + 3 * 506);
  });

  it("never grants less than the provider reserves for a call with an output cap", () => {
    const estimate = new Estimator().estimate(call({ maxOutput: 4_000 }));
    expect(estimate.need).toBeGreaterThanOrEqual(1_000 + 4_000);
    const small = new Estimator().estimate(call({ maxOutput: 100 }));
    expect(small.output).toBe(100);
  });

  it("learns the run's output and how the provider counts its input; σ shrinks on a steady run", () => {
    const estimator = new Estimator();
    for (let i = 0; i < 20; i++) {
      const features = call({ countedInput: 1_000 + i * 100 });
      const estimate = estimator.estimate(features);
      // The provider counts 10% more input than the request's count; output is always 200.
      estimator.record(features, estimate, {
        input: Math.round(features.countedInput * 1.1),
        output: 200,
        latencyMs: 50,
      });
    }
    const next = estimator.estimate(call({ countedInput: 3_000 }));
    expect(next.input).toBeGreaterThan(3_250);
    expect(next.input).toBeLessThan(3_350);
    expect(next.output).toBeGreaterThan(190);
    expect(next.output).toBeLessThan(210);
    expect(Math.abs(next.total - (3_300 + 200))).toBeLessThan(100);
    expect(next.sigma).toBeLessThan(100);
  });

  it("does not let a tokenizer the provider has not been compared with yet lower an input it learned to count", () => {
    const estimator = new Estimator();
    // The provider counts 1.3x the characters' estimate.
    for (let i = 0; i < 5; i++) {
      const features = call({ countedInput: 1_000 });
      estimator.record(features, estimator.estimate(features), { input: 1_300, output: 50, latencyMs: 1 });
    }
    // Near a window's end the call is counted exactly: 800 by the tokenizer, 1,000 by characters.
    const first = estimator.estimate(call({ countedInput: 800, exact: true, approxInput: 1_000 }));
    expect(first.input).toBe(1_300);
    // Once the tokenizer's counts have been compared with the provider's twice, they are used.
    for (let i = 0; i < 2; i++) {
      const features = call({ countedInput: 800, exact: true, approxInput: 1_000 });
      estimator.record(features, estimator.estimate(features), { input: 1_300, output: 50, latencyMs: 1 });
    }
    const later = estimator.estimate(call({ countedInput: 800, exact: true, approxInput: 1_000 }));
    expect(later.input).toBeGreaterThan(1_250);
    expect(later.input).toBeLessThan(1_350);
  });

  it("keeps runs apart, and predicts a new run from what its model cost across the fleet", () => {
    const estimator = new Estimator();
    for (let i = 0; i < 5; i++) {
      const big = call({ runId: "big" });
      estimator.record(big, estimator.estimate(big), { input: 1_000, output: 3_000, latencyMs: 10 });
    }
    const small = call({ runId: "small" });
    estimator.record(small, estimator.estimate(small), { input: 1_000, output: 50, latencyMs: 10 });
    expect(estimator.estimate(call({ runId: "small" })).output).toBe(50);
    expect(estimator.estimate(call({ runId: "big" })).output).toBe(3_000);
    expect(estimator.estimate(call({ runId: "new" })).output).toBeGreaterThan(1_000);
  });

  it("grows more cautious with each 429 that slips through, up to its cap", () => {
    const estimator = new Estimator();
    for (let i = 0; i < 10; i++) estimator.slipped();
    expect(estimator.k).toBe(ESTIMATOR_DEFAULTS.kMax);
  });
});

describe("FeatureEstimator (ridge regression over declared features)", () => {
  it("learns output tokens and latency from the tool count, where a run's average cannot", () => {
    const estimator = new FeatureEstimator(["model", "tools"]);
    for (let i = 0; i < 60; i++) {
      const features = call({ runId: `r${i}`, toolCount: i % 4 });
      const estimate = estimator.estimate(features);
      estimator.record(features, estimate, {
        input: 1_000,
        output: 100 + 300 * (i % 4),
        latencyMs: 200 + 100 * (i % 4),
      });
    }
    const none = estimator.estimate(call({ runId: "fresh", toolCount: 0 }));
    const three = estimator.estimate(call({ runId: "fresh", toolCount: 3 }));
    expect(Math.abs(none.output - 100)).toBeLessThan(30);
    expect(Math.abs(three.output - 1_000)).toBeLessThan(30);
    expect(Math.abs(three.latencyMs - 500)).toBeLessThan(20);
  });
});

describe("TokenCounter", () => {
  it("counts with the model's own tokenizer when it is public, about four characters a token otherwise", async () => {
    const counter = new TokenCounter();
    const text = "Holdfast holds a run before its provider says 429. ".repeat(20);
    expect(counter.count(text, "gpt-4o").exact).toBe(false);
    await counter.load();
    const exact = counter.count(text, "gpt-4o");
    expect(exact.exact).toBe(true);
    expect(exact.tokens).toBeGreaterThan(150);
    expect(exact.tokens).toBeLessThan(text.length / 4);
    expect(counter.count(text, "claude-sonnet-4-5")).toEqual({
      tokens: Math.ceil(text.length / 4),
      exact: false,
    });
    expect(encodingOf("gpt-4-turbo")).toBe("cl100k_base");
    expect(encodingOf("o3-mini")).toBe("o200k_base");
  });
});
