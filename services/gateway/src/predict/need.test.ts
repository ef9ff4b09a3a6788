import { ANTHROPIC_HEADERS, type Estimate, OPENAI_HEADERS } from "@holdfast/predict";
import { describe, expect, it } from "vitest";
import { chargedOf, floorOf, NOTHING, needOf } from "./need.js";

/** 1,000 tokens in, 400 out estimated, granted with a margin to 1,800 in all. */
const ESTIMATE: Estimate = {
  input: 1_000,
  output: 400,
  total: 1_400,
  sigma: 100,
  k: 4,
  need: 1_800,
  latencyMs: 0,
};
const features = (maxOutput: number | undefined) => ({
  runId: "run-1",
  model: "gpt-4o",
  tag: "",
  countedInput: 1_000,
  exact: false,
  maxOutput,
  toolCount: 0,
  messageCount: 2,
});

describe("what a call takes of its key's window", () => {
  it("with one tokens window (OpenAI's): a request and its estimate plus margin", () => {
    expect(needOf(ESTIMATE, OPENAI_HEADERS)).toEqual({
      requests: 1,
      tokens: 1_800,
      inputTokens: 1_000,
      outputTokens: 800,
    });
  });

  it("with input and output windows apart (Anthropic's): the input and the rest, not their sum as tokens", () => {
    expect(needOf(ESTIMATE, ANTHROPIC_HEADERS).tokens).toBe(0);
  });

  it("for certain: its input and its output cap, or its estimated output without a cap", () => {
    expect(floorOf(ESTIMATE, features(200), OPENAI_HEADERS)).toEqual({
      requests: 1,
      tokens: 1_200,
      inputTokens: 1_000,
      outputTokens: 200,
    });
    expect(floorOf(ESTIMATE, features(undefined), OPENAI_HEADERS).outputTokens).toBe(400);
  });
});

describe("chargedOf: what the provider counted of a call", () => {
  const predicted = {
    need: needOf(ESTIMATE, OPENAI_HEADERS),
    floor: floorOf(ESTIMATE, features(200), OPENAI_HEADERS),
    features: features(200),
  };
  const usage = { reported: true, inputTokens: 900, outputTokens: 150, cachedInputTokens: 300 };

  it("nothing for a refusal before the work (a 429, a 4xx)", () => {
    expect(chargedOf("openai", predicted, { usage, status: 429 })).toEqual(NOTHING);
    expect(chargedOf("openai", predicted, { usage, status: 400 })).toEqual(NOTHING);
  });

  it("an answer: its input and its output cap (or its output, when larger)", () => {
    expect(chargedOf("openai", predicted, { usage, status: 200 })).toEqual({
      requests: 1,
      tokens: 1_100,
      inputTokens: 900,
      outputTokens: 200,
    });
    expect(
      chargedOf("openai", predicted, { usage: { ...usage, outputTokens: 500 }, status: 200 }).outputTokens,
    ).toBe(500);
  });

  it("Anthropic counts no cache reads against the window", () => {
    expect(chargedOf("anthropic", predicted, { usage, status: 200 }).inputTokens).toBe(600);
  });

  it("no usage back (an error, a cut connection): what the call was sure to take", () => {
    expect(chargedOf("openai", predicted, { usage: undefined, status: 200 })).toEqual(predicted.floor);
    expect(chargedOf("openai", predicted, { usage, status: 502 })).toEqual(predicted.floor);
  });
});
