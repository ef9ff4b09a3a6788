import { ActorKind, FailureReason } from "@holdfast/proto";
import { expect } from "vitest";
import { type DecodedEnvelope, type EventPayload, makeEnvelope } from "../envelope.js";
import { start } from "./commands.fixture.js";
import { type CompleteStep, decide, type FailStep, type ObservedOutcome, type RunCommand } from "./decide.js";
import { evolve, foldRun, initialState, type RunState } from "./state.js";

export { identity, start } from "./commands.fixture.js";

// Given/when/then for the run decider: given these events, when this command, then these
// events. Shared by the run's specifications.

export const RUN = "agent-7";
export const NOW = 1_764_000_000_000;

/** Envelopes for payloads, numbered from 1 as the log would. */
export function history(...payloads: EventPayload[]): DecodedEnvelope[] {
  return payloads.map((payload, i) =>
    makeEnvelope({
      id: `e${i + 1}`,
      runId: RUN,
      sequence: i + 1,
      timestampMs: NOW + i * 10,
      tag: "t",
      payload,
    }),
  );
}

export function given(...payloads: EventPayload[]) {
  const state = foldRun(RUN, history(...payloads));
  return {
    state,
    when: (command: RunCommand) => ({
      // biome-ignore lint/suspicious/noThenProperty: given/when/then is the specification's grammar; this object is never awaited
      then: (...expected: EventPayload[]) => expect(decide(command, state, NOW)).toEqual(expected),
    }),
  };
}

export function observed(
  tokens: [number, number],
  nanoUsd: number | null,
  extra: Partial<ObservedOutcome> = {},
): ObservedOutcome {
  return {
    model: "gpt-4o-mini-2024-07-18",
    upstreamStatus: 200,
    usage: {
      reported: true,
      inputTokens: tokens[0],
      outputTokens: tokens[1],
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
    },
    cost: { known: nanoUsd !== null, nanoUsd: nanoUsd ?? 0 },
    latencyMs: 120,
    firstByteMs: 40,
    responseId: "chatcmpl-1",
    estimated: false,
    ...extra,
  };
}

export const complete = (stepId: string, outcome = observed([10, 5], 700)): CompleteStep => ({
  type: "CompleteStep",
  stepId,
  outcome,
  finishReason: "stop",
  toolCalls: [],
  toolCallsSignature: "",
});

export const fail = (stepId: string, outcome = observed([0, 0], 0)): FailStep => ({
  type: "FailStep",
  stepId,
  outcome: { ...outcome, upstreamStatus: 429 },
  reason: FailureReason.FAILURE_REASON_UPSTREAM_STATUS,
  errorType: "rate_limit_error",
  errorCode: "rate_limit_exceeded",
  errorMessage: "slow down",
});

/** The events a command decides on a state, as the next payloads of the run. */
export function apply(
  state: RunState,
  ...commands: RunCommand[]
): { state: RunState; events: EventPayload[] } {
  const events: EventPayload[] = [];
  for (const command of commands) {
    for (const payload of decide(command, state, NOW)) {
      events.push(payload);
      state = evolve(
        state,
        makeEnvelope({
          id: `d${state.lastSequence + 1}`,
          runId: RUN,
          sequence: state.lastSequence + 1,
          timestampMs: NOW,
          tag: "t",
          payload,
        }),
      );
    }
  }
  return { state, events };
}

export const started = (stepId: string) => decide(start(stepId), initialState(RUN), NOW)[0]!;

/** An operator, as the control token acts. */
export const operator = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "control token" };

/** The operator's hold and stop, as events. */
export const held: EventPayload = {
  $case: "runHeld",
  value: { actor: operator, reason: "look", selector: undefined, ruleId: "" },
};
export const stopped: EventPayload = {
  $case: "runStopped",
  value: { actor: operator, reason: "enough", selector: undefined },
};
