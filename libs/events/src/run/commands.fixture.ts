import { Api, RunSource } from "@holdfast/proto";
import { NO_LIMITS } from "./admission.js";
import type { StartStep } from "./decide.js";

// For tests (this package's and others', as "@holdfast/events/fixtures"): the commands a
// gateway gives the run decider, with every field filled in.

export const identity = {
  source: RunSource.RUN_SOURCE_HEADER,
  key: "x-holdfast-run",
  fingerprint: "",
  generation: 0,
};

/** The start of a plain non-streaming Chat Completions call's step (fields overridable). */
export function start(stepId: string, overrides: Partial<StartStep> = {}): StartStep {
  return {
    type: "StartStep",
    stepId,
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
    tag: "t",
    limits: NO_LIMITS,
    rules: [],
    ...overrides,
  };
}
