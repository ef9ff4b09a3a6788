import { Api, NO_LIMITS, RunSource, type StartStep } from "@holdfast/events";

/**
 * For tests: the command that starts a call's step, as a gateway gives it, for a plain
 * non-streaming Chat Completions call (fields overridable).
 */
export function startStep(stepId: string, overrides: Partial<StartStep> = {}): StartStep {
  return {
    type: "StartStep",
    stepId,
    api: Api.API_OPENAI_CHAT_COMPLETIONS,
    model: "gpt-4o-mini",
    stream: false,
    identity: { source: RunSource.RUN_SOURCE_HEADER, key: "X-Holdfast-Run", fingerprint: "", generation: 0 },
    messageCount: 1,
    upstream: "http://127.0.0.1:1",
    gateway: "gw#1",
    estimatedInputTokens: 10,
    promptHash: "",
    reservedNanoUsd: 0,
    budgetLeases: [],
    tag: "",
    limits: NO_LIMITS,
    rules: [],
    ...overrides,
  };
}
