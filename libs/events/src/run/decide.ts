import {
  type Api,
  type Cost,
  type FailureReason,
  type RunIdentity,
  StepCompleted,
  StepFailed,
  type StepOutcome,
  type Usage,
} from "@holdfast/proto";
import type { EventPayload } from "../envelope.js";
import type { RunState } from "./state.js";

/** Start a model call as the run's next step. */
export interface StartStep {
  readonly type: "StartStep";
  readonly stepId: string;
  readonly api: Api;
  readonly model: string;
  readonly stream: boolean;
  readonly identity: RunIdentity;
  readonly messageCount: number;
  /** Upstream origin (scheme://host:port). */
  readonly upstream: string;
  readonly gateway: string;
  readonly estimatedInputTokens: number;
}

/** What was observed of a call's answer (or estimated, when it was lost). */
export interface ObservedOutcome {
  readonly model: string;
  readonly upstreamStatus: number;
  readonly usage: Usage;
  readonly cost: Cost;
  readonly latencyMs: number;
  readonly firstByteMs: number;
  readonly responseId: string;
  readonly estimated: boolean;
}

/** Record that a call in flight was answered. */
export interface CompleteStep {
  readonly type: "CompleteStep";
  readonly stepId: string;
  readonly outcome: ObservedOutcome;
  readonly finishReason: string;
  readonly toolCalls: readonly string[];
}

/** Record that a call in flight failed (or was lost). */
export interface FailStep {
  readonly type: "FailStep";
  readonly stepId: string;
  readonly outcome: ObservedOutcome;
  readonly reason: FailureReason;
  readonly errorType: string;
  readonly errorCode: string;
  readonly errorMessage: string;
}

export type RunCommand = StartStep | CompleteStep | FailStep;

/**
 * What a command makes of the run as it stands: the events to append, in order, or none
 * when the command has already been carried out. Pure; `nowMs` is the caller's clock
 * (decisions against time-based limits use it).
 *
 * Idempotent by step: starting a step that is already in flight, or finishing one that
 * is not in flight (finished before, by this gateway or another, or never started),
 * appends nothing, so a retry long after the log's dedupe window adds no second outcome.
 */
export function decide(command: RunCommand, state: RunState, _nowMs: number): EventPayload[] {
  switch (command.type) {
    case "StartStep": {
      if (state.open.has(command.stepId)) return [];
      return [
        {
          $case: "stepStarted",
          value: {
            stepId: command.stepId,
            step: state.started + 1,
            api: command.api,
            model: command.model,
            stream: command.stream,
            identity: command.identity,
            messageCount: command.messageCount,
            upstream: command.upstream,
            gateway: command.gateway,
            estimatedInputTokens: command.estimatedInputTokens,
          },
        },
      ];
    }
    case "CompleteStep":
    case "FailStep": {
      const open = state.open.get(command.stepId);
      if (open === undefined) return [];
      const outcome: StepOutcome = {
        stepId: open.stepId,
        step: open.step,
        api: open.api,
        stream: open.stream,
        ...command.outcome,
        model: command.outcome.model || open.model,
      };
      if (command.type === "CompleteStep") {
        return [
          {
            $case: "stepCompleted",
            value: StepCompleted.fromPartial({
              outcome,
              finishReason: command.finishReason,
              toolCalls: [...command.toolCalls],
            }),
          },
        ];
      }
      return [
        {
          $case: "stepFailed",
          value: StepFailed.fromPartial({
            outcome,
            reason: command.reason,
            errorType: command.errorType,
            errorCode: command.errorCode,
            errorMessage: command.errorMessage,
          }),
        },
      ];
    }
  }
}
