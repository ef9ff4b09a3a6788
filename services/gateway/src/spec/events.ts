import {
  type Actor,
  ActorKind,
  Api,
  CompactionMode,
  emptySelector,
  FLEET,
  LimitKind,
  RunAction,
  type Selector,
  StepCompleted,
  type Trip,
} from "@holdfast/events";
import type { GivenEvent } from "./specification.js";

// The events a specification gives, as their authors write them: an operator's (the control
// service), another gateway's earlier steps. Each names only what a reader of the run uses.

export const OPERATOR: Actor = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "spec" };

/** A run's events, labelled with its tag. */
export function run(runId: string, tag = "") {
  const on = (payload: GivenEvent["payload"]): GivenEvent => ({ runId, tag, payload });
  return {
    /** An operator held the run. */
    held: (reason = "look first") =>
      on({ $case: "runHeld", value: { actor: OPERATOR, reason, selector: undefined, ruleId: "" } }),
    /** An operator resumed it (with a window of its own when `maxSteps` is given). */
    resumed: (reason = "carry on", limits?: { maxSteps: number }) =>
      on({
        $case: "runResumed",
        value: {
          actor: OPERATOR,
          reason,
          selector: undefined,
          limits:
            limits === undefined
              ? undefined
              : { maxSteps: limits.maxSteps, maxCostNanoUsd: 0, maxMinutes: 0, maxTokensPerMinute: 0 },
          overrides: limits !== undefined,
          checkpoint: false,
          compact: CompactionMode.COMPACTION_MODE_UNSPECIFIED,
        },
      }),
    /** An operator stopped it. */
    stopped: (reason = "enough") =>
      on({ $case: "runStopped", value: { actor: OPERATOR, reason, selector: undefined } }),
    /** A gateway tripped the run: a limit or a budget across runs was crossed. */
    tripped: (trip: Partial<Trip>, action: RunAction = RunAction.RUN_ACTION_HOLD) =>
      on({
        $case: "runTripped",
        value: {
          trip: {
            limit: LimitKind.LIMIT_KIND_UNSPECIFIED,
            limitValue: 0,
            spentValue: 0,
            budgetKey: "",
            period: "",
            crossedByStepId: "",
            callModel: "",
            prediction: undefined,
            ...trip,
          },
          action,
        },
      }),
    /** A step another gateway served, answered and recorded: its start and its completion. */
    step: (step: number, cost: { nanoUsd: number; inputTokens: number; outputTokens: number }) => {
      const stepId = `${runId}-given-${step}`;
      const usage = {
        reported: true,
        inputTokens: cost.inputTokens,
        outputTokens: cost.outputTokens,
        cachedInputTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
      };
      return [
        on({
          $case: "stepStarted",
          value: {
            stepId,
            step,
            api: Api.API_OPENAI_CHAT_COMPLETIONS,
            model: "gpt-4o-mini",
            stream: false,
            identity: undefined,
            messageCount: 1,
            upstream: "https://api.openai.com",
            gateway: "gw-given#000000",
            estimatedInputTokens: cost.inputTokens,
            promptHash: "",
            reservedNanoUsd: 0,
            budgetLeases: [],
            prediction: undefined,
            route: undefined,
            origin: undefined,
          },
        }),
        // As the decider writes it (version 2): what it shares with a failure is in `outcome`.
        on({
          $case: "stepCompleted",
          value: StepCompleted.fromPartial({
            outcome: {
              stepId,
              step,
              api: Api.API_OPENAI_CHAT_COMPLETIONS,
              model: "gpt-4o-mini",
              upstreamStatus: 200,
              usage,
              cost: { known: true, nanoUsd: cost.nanoUsd },
              latencyMs: 100,
              firstByteMs: 50,
              responseId: `chatcmpl-${stepId}`,
            },
            finishReason: "stop",
          }),
        }),
      ];
    },
  };
}

/** An operator's standing hold on every run these fields select (`holdfast hold --tag …`). */
export function holdRuleAdded(ruleId: string, selector: Partial<Selector>, reason = "freeze"): GivenEvent {
  return {
    runId: FLEET,
    payload: {
      $case: "holdRuleAdded",
      value: { ruleId, selector: { ...emptySelector(), ...selector }, actor: OPERATOR, reason },
    },
  };
}

/** An operator lifted a standing hold (`holdfast resume --rule …`). */
export function holdRuleLifted(ruleId: string, reason = "thaw"): GivenEvent {
  return { runId: FLEET, payload: { $case: "holdRuleLifted", value: { ruleId, actor: OPERATOR, reason } } };
}

/** An operator's approval of an answer the tool-call gate held. */
export function toolCallApproved(runId: string, gated: { gateId: string; stepId: string; step: number }) {
  return {
    runId,
    payload: {
      $case: "toolCallApproved",
      value: { ...gated, actor: OPERATOR, reason: "looked fine" },
    },
  } satisfies GivenEvent;
}

/** An operator's denial of an answer the tool-call gate held. */
export function toolCallDenied(runId: string, gated: { gateId: string; stepId: string; step: number }) {
  return {
    runId,
    payload: {
      $case: "toolCallDenied",
      value: { ...gated, actor: OPERATOR, reason: "not that", runStopped: false },
    },
  } satisfies GivenEvent;
}
