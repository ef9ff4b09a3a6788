import { type CompleteStep, type FailStep, FailureReason, type ObservedOutcome } from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { abridged } from "./outcome.js";

// An outcome the log refused for good is recorded again abridged: without what the
// provider said in words, with what it is charged for standing.

const outcome: ObservedOutcome = {
  model: "gpt-4o-mini",
  upstreamStatus: 200,
  usage: {
    reported: true,
    inputTokens: 5,
    outputTokens: 7,
    cachedInputTokens: 0,
    cacheWriteTokens: 0,
    reasoningTokens: 0,
  },
  cost: { known: true, nanoUsd: 1_234 },
  latencyMs: 80,
  firstByteMs: 20,
  responseId: "chatcmpl-abc",
  estimated: false,
  usageProblem: "something about the usage",
};

describe("abridged", () => {
  it("keeps a completed step's charge and drops the provider's texts, counting its tool calls", () => {
    const command: CompleteStep = {
      type: "CompleteStep",
      stepId: "s1",
      outcome,
      finishReason: "tool_calls",
      toolCalls: ["a", "b", "c"],
      toolCallsSignature: "sig",
      toolCallsOmitted: 10,
    };
    expect(abridged(command)).toEqual({
      type: "CompleteStep",
      stepId: "s1",
      outcome: { ...outcome, responseId: "", usageProblem: "", abridged: true },
      finishReason: "",
      toolCalls: [],
      toolCallsSignature: "sig",
      toolCallsOmitted: 13,
    });
  });

  it("keeps a failed step's reason and charge and drops the error's texts", () => {
    const command: FailStep = {
      type: "FailStep",
      stepId: "s2",
      outcome: { ...outcome, upstreamStatus: 500 },
      reason: FailureReason.FAILURE_REASON_UPSTREAM_STATUS,
      errorType: "server_error",
      errorCode: "boom",
      errorMessage: "x".repeat(10_000),
    };
    expect(abridged(command)).toEqual({
      type: "FailStep",
      stepId: "s2",
      outcome: { ...outcome, upstreamStatus: 500, responseId: "", usageProblem: "", abridged: true },
      reason: FailureReason.FAILURE_REASON_UPSTREAM_STATUS,
      errorType: "",
      errorCode: "",
      errorMessage: "",
    });
  });
});
