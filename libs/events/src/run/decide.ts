import {
  type Actor,
  ActorKind,
  type Api,
  CompactionMode,
  type Cost,
  type FailureReason,
  type GatedToolCall,
  LimitKind,
  type Prediction,
  type RouteChoice,
  RunAction,
  type RunCompacted,
  type RunIdentity,
  type Selector,
  StepCompleted,
  StepFailed,
  type StepOrigin,
  type StepOutcome,
  type Trip,
  type UnparkReason,
  type Usage,
  UsageEstimate,
  type WindowLimits,
} from "@holdfast/proto";
import { boundText, EVENT_BOUNDS } from "../bounds.js";
import type { EventPayload } from "../envelope.js";
import { NothingGatedError, RunBusyError, RunGatedError, RunHeldError, RunStoppedError } from "../errors.js";
import type { HoldRule } from "../fleet/rules.js";
import { type ConfiguredLimits, headroom, ruleHolding } from "./admission.js";
import { type DurableCommand, decideDurable } from "./durable.js";
import { heldByGate, LOOP_RULE, type PendingGate, type RunState, RunStatus } from "./state.js";

/** Start a model call as the run's next step, unless a limit, a hold or a rule says no. */
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
  /** The conversation prefix hash of this call. */
  readonly promptHash: string;
  /** Cost reserved against the run's limits while the call is in flight. */
  readonly reservedNanoUsd: number;
  /** The budget leases the reservation was taken from. */
  readonly budgetLeases: readonly string[];
  /** What rate-limit prediction decided before the call, when it is on. */
  readonly prediction?: Prediction;
  /** Where a call asking for a routed alias went, and why. */
  readonly route?: RouteChoice;
  /** The recorded step an operator sent this call again from (replay, fork, compare). */
  readonly origin?: StepOrigin;
  /** The run's tag as this call names it (a standing rule may select on it). */
  readonly tag: string;
  readonly limits: ConfiguredLimits;
  /** The fleet's standing hold rules in force. */
  readonly rules: readonly HoldRule[];
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
  /** Why `estimated` is set; unset when it is not. */
  readonly usageEstimate?: UsageEstimate;
  /** What was wrong with the provider's usage report, when anything was. */
  readonly usageProblem?: string;
  /** Charged at the unknown rate: the model has no price, and a cost limit or budget applies. */
  readonly unknownPrice?: boolean;
  /** Something the provider said was cut to its bound before this command (the decider cuts the rest). */
  readonly truncated?: boolean;
  /** Recorded again without the provider's texts: the log refused the outcome as first decided. */
  readonly abridged?: boolean;
}

/** Record that a call in flight was answered. */
export interface CompleteStep {
  readonly type: "CompleteStep";
  readonly stepId: string;
  readonly outcome: ObservedOutcome;
  readonly finishReason: string;
  readonly toolCalls: readonly string[];
  /** The answer's tool calls as one signature (loop detection); empty when it asked for none. */
  readonly toolCallsSignature: string;
  /** Tool calls the answer asked for beyond those in `toolCalls` (an abridged outcome lists none). */
  readonly toolCallsOmitted?: number;
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

/** An operator holds the run. */
export interface HoldRun {
  readonly type: "HoldRun";
  readonly actor: Actor;
  readonly reason: string;
  readonly selector?: Selector;
}

/** An operator resumes the run: parked calls go on, a new window of limits starts. */
export interface ResumeRun {
  readonly type: "ResumeRun";
  readonly actor: Actor;
  readonly reason: string;
  readonly selector?: Selector;
  /** Limits for the new window; unset ones are the configured ones. */
  readonly limits?: WindowLimits;
  /** Only a held or stopped run is resumed (a resume by selector); by id, any run gets a new window. */
  readonly onlyIfHeld: boolean;
  /** Compact the conversation before the next call goes on. */
  readonly compact?: CompactionMode;
}

/**
 * The provider's window fits the next call of a run a rate-limit checkpoint holds: the run
 * goes on in the same window of limits. Only while the checkpoint still holds it (nobody
 * held, stopped or resumed it since).
 */
export interface ClearCheckpoint {
  readonly type: "ClearCheckpoint";
  readonly gateway: string;
}

/** The conversation was compacted before a call (the event's fields, as decided by the gateway). */
export interface CompactRun {
  readonly type: "CompactRun";
  readonly compaction: RunCompacted;
}

/** A call the provider refused with a 429 is sent again (its step stays the same). */
export interface RetryStep {
  readonly type: "RetryStep";
  readonly stepId: string;
  readonly attempt: number;
  readonly upstreamStatus: number;
  readonly retryAfterMs: number;
  readonly wastedInputTokens: number;
  readonly keyId: string;
  /** The attempt went to another route target. */
  readonly route?: RouteChoice;
}

/** Stop the run: parked and later calls get a 409 until it is resumed. */
export interface StopRun {
  readonly type: "StopRun";
  readonly actor: Actor;
  readonly reason: string;
  readonly selector?: Selector;
}

/** A budget across runs is spent: hold (or stop) the run before its next call. */
export interface TripRun {
  readonly type: "TripRun";
  readonly trip: Trip;
  readonly action: "hold" | "stop";
}

/**
 * A call that is no step (a passed-through path naming the run) meets the standing rules:
 * the run is held by the first that matches, as its next step's start would be.
 */
export interface HoldByRule {
  readonly type: "HoldByRule";
  readonly rules: readonly HoldRule[];
  readonly tag: string;
}

/** Park a call of a held run on this gateway. */
export interface ParkCall {
  readonly type: "ParkCall";
  readonly parkId: string;
  readonly api: Api;
  readonly model: string;
  readonly stream: boolean;
  readonly gateway: string;
}

/** A parked call leaves its parking. */
export interface UnparkCall {
  readonly type: "UnparkCall";
  readonly parkId: string;
  readonly how: UnparkReason;
  readonly parkedMs: number;
}

/**
 * Hold an answer before the agent sees it: a tool_gate rule matched one of its tool calls
 * (`gate`), or the same tool calls came max_repeated_tool_calls times in a row (`loop`).
 * The answer's outcome is recorded before this.
 */
export interface GateAnswer {
  readonly type: "GateAnswer";
  readonly gateId: string;
  readonly stepId: string;
  readonly step: number;
  readonly api: Api;
  readonly model: string;
  readonly stream: boolean;
  /** The answer's tool calls as recorded (at most EVENT_BOUNDS.toolCallsGated, the matched one among them). */
  readonly toolCalls: readonly GatedToolCall[];
  /** Tool calls of the answer beyond those recorded. */
  readonly toolCallsOmitted?: number;
  readonly match:
    | {
        readonly kind: "gate";
        readonly toolCall: GatedToolCall;
        /** The rule's key and what it says. */
        readonly rule: string;
        readonly ruleText: string;
      }
    | {
        readonly kind: "loop";
        readonly repeats: number;
        readonly maxRepeats: number;
        readonly signature: string;
      };
  readonly action: "hold" | "stop";
  readonly requestHash: string;
  readonly answerHash: string;
  readonly promptHash: string;
  readonly gateway: string;
}

/** Let held answers through: one by its gate id, or every one the run has. */
export interface ApproveAnswer {
  readonly type: "ApproveAnswer";
  readonly actor: Actor;
  readonly reason: string;
  readonly gateId?: string;
}

/** Refuse held answers: one by its gate id, or every one the run has. */
export interface DenyAnswer {
  readonly type: "DenyAnswer";
  readonly actor: Actor;
  readonly reason: string;
  readonly gateId?: string;
}

/** Nobody is left to take a held answer (its client went away, its gateway shut down). */
export interface AbandonAnswer {
  readonly type: "AbandonAnswer";
  readonly gateId: string;
  readonly why: "client_gone" | "gateway_shutdown";
  readonly gateway: string;
}

export type RunCommand =
  | StartStep
  | CompleteStep
  | FailStep
  | HoldRun
  | ResumeRun
  | ClearCheckpoint
  | StopRun
  | TripRun
  | HoldByRule
  | ParkCall
  | UnparkCall
  | GateAnswer
  | ApproveAnswer
  | DenyAnswer
  | AbandonAnswer
  | RetryStep
  | CompactRun
  | DurableCommand;

/**
 * What a command makes of the run as it stands: the events to append, in order, or none
 * when the command has already been carried out. Pure; `nowMs` is the caller's clock.
 *
 * Idempotent by step: starting a step that is already in flight, or finishing one that
 * is not in flight (finished before, by this gateway or another, or never started),
 * appends nothing, so a retry long after the log's dedupe window adds no second outcome.
 *
 * A call cannot start on a held run (RunHeldError: park it) or a stopped one
 * (RunStoppedError: refuse it), nor, near the run's cost limit, while calls in flight
 * could take it past the limit (RunBusyError: wait for one of them to finish). A start that a standing rule or a crossed limit stops
 * decides a RunHeld or RunTripped instead of the StepStarted: the run is then held (or
 * stopped), and the caller parks the call (or refuses it).
 */
export function decide(command: RunCommand, state: RunState, nowMs: number): EventPayload[] {
  switch (command.type) {
    case "SubmitRun":
    case "LeaseRun":
    case "RecordStep":
    case "ReleaseRun":
    case "FinishRun":
    case "FailRun":
    case "RedriveRun":
      return decideDurable(
        command,
        state.durable,
        state.status === RunStatus.Held || state.status === RunStatus.Stopped,
      );
    case "StartStep":
      return decideStart(command, state, nowMs);
    case "CompleteStep":
    case "FailStep": {
      const open = state.open.get(command.stepId);
      if (open === undefined) return [];
      // What the provider said is held to its bounds here, where it becomes an event: no
      // answer can make an outcome the log refuses for its size.
      const bounded = new Bounded(command.outcome.truncated === true);
      const said = command.outcome;
      const outcome: StepOutcome = {
        stepId: open.stepId,
        step: open.step,
        api: open.api,
        stream: open.stream,
        ...said,
        model: bounded.text(said.model, EVENT_BOUNDS.modelChars) || open.model,
        responseId: bounded.text(said.responseId, EVENT_BOUNDS.responseIdChars),
        usageEstimate: said.usageEstimate ?? UsageEstimate.USAGE_ESTIMATE_UNSPECIFIED,
        usageProblem: bounded.text(said.usageProblem ?? "", EVENT_BOUNDS.usageProblemChars),
        unknownPrice: said.unknownPrice ?? false,
        truncated: false,
        abridged: said.abridged ?? false,
      };
      if (command.type === "CompleteStep") {
        const listed = command.toolCalls.slice(0, EVENT_BOUNDS.toolCallsListed);
        const toolCallsOmitted =
          command.toolCalls.length - listed.length + Math.max(0, command.toolCallsOmitted ?? 0);
        const toolCalls = listed.map((name) => bounded.text(name, EVENT_BOUNDS.toolNameChars));
        const finishReason = bounded.text(command.finishReason, EVENT_BOUNDS.finishReasonChars);
        return [
          {
            $case: "stepCompleted",
            value: StepCompleted.fromPartial({
              outcome: { ...outcome, truncated: bounded.cut || toolCallsOmitted > 0 },
              finishReason,
              toolCalls,
              toolCallsSignature: command.toolCallsSignature,
              toolCallsOmitted,
            }),
          },
        ];
      }
      const errorType = bounded.text(command.errorType, EVENT_BOUNDS.errorLabelChars);
      const errorCode = bounded.text(command.errorCode, EVENT_BOUNDS.errorLabelChars);
      const errorMessage = bounded.text(command.errorMessage, EVENT_BOUNDS.errorMessageChars);
      return [
        {
          $case: "stepFailed",
          value: StepFailed.fromPartial({
            outcome: { ...outcome, truncated: bounded.cut },
            reason: command.reason,
            errorType,
            errorCode,
            errorMessage,
          }),
        },
      ];
    }
    case "HoldRun":
      // A run held (or stopped) only by answers the gate holds is held by the operator
      // too: deciding the answers must not lift the operator's hold.
      if ((state.status === RunStatus.Held || state.status === RunStatus.Stopped) && !heldByGate(state)) {
        return [];
      }
      return [
        {
          $case: "runHeld",
          value: {
            actor: command.actor,
            reason: command.reason,
            selector: command.selector,
            ruleId: "",
          },
        },
      ];
    case "ClearCheckpoint": {
      if (!heldByCheckpoint(state)) return [];
      const since = state.hold?.sinceMs ?? nowMs;
      return [
        {
          $case: "checkpointCleared",
          value: { gateway: command.gateway, heldMs: Math.max(0, nowMs - since) },
        },
      ];
    }
    case "ResumeRun": {
      const held = state.status === RunStatus.Held || state.status === RunStatus.Stopped;
      if (command.onlyIfHeld && !held) return [];
      // An answer the gate holds is approved or denied, not resumed past: by selector the
      // run is left as it is, by id the operator is told.
      if (state.gates.size > 0) {
        if (command.onlyIfHeld) return [];
        throw new RunGatedError(state.runId);
      }
      const limits = command.limits;
      const overrides =
        limits !== undefined &&
        (limits.maxSteps > 0 ||
          limits.maxCostNanoUsd > 0 ||
          limits.maxMinutes > 0 ||
          limits.maxTokensPerMinute > 0);
      return [
        {
          $case: "runResumed",
          value: {
            actor: command.actor,
            reason: command.reason,
            selector: command.selector,
            limits: overrides ? limits : undefined,
            overrides,
            checkpoint: false,
            compact: command.compact ?? CompactionMode.COMPACTION_MODE_UNSPECIFIED,
          },
        },
      ];
    }
    case "StopRun": {
      // A stop refuses the answers the gate holds: their agents get the error, not the answer.
      const denials = denyAll(state, command.actor, command.reason, true);
      if (state.status === RunStatus.Stopped && denials.length === 0) return [];
      return [
        ...denials,
        {
          $case: "runStopped",
          value: { actor: command.actor, reason: command.reason, selector: command.selector },
        },
      ];
    }
    case "GateAnswer":
      return decideGate(command, state);
    case "ApproveAnswer": {
      const gates = gatesNamed(state, command.gateId);
      return gates.map((gate) => ({
        $case: "toolCallApproved" as const,
        value: {
          gateId: gate.gateId,
          stepId: gate.stepId,
          step: gate.step,
          actor: command.actor,
          reason: command.reason,
        },
      }));
    }
    case "DenyAnswer":
      return gatesNamed(state, command.gateId).map((gate) =>
        denial(gate, command.actor, command.reason, gate.action === "stop"),
      );
    case "AbandonAnswer": {
      const gate = state.gates.get(command.gateId);
      if (gate === undefined) return [];
      return [
        {
          $case: "toolCallAbandoned",
          value: {
            gateId: gate.gateId,
            stepId: gate.stepId,
            step: gate.step,
            why: command.why,
            gateway: command.gateway,
          },
        },
      ];
    }
    case "CompactRun":
      // The same compaction again (a retried write) is one compaction.
      if (
        state.compactions.some((c) => c.prefixHash === command.compaction.prefixHash) &&
        state.compactNext === CompactionMode.COMPACTION_MODE_UNSPECIFIED
      )
        return [];
      return [{ $case: "runCompacted", value: command.compaction }];
    case "RetryStep": {
      const open = state.open.get(command.stepId);
      // Finished, or this retry (or a later one) already recorded.
      if (open === undefined || open.attempt >= command.attempt) return [];
      return [
        {
          $case: "stepRetried",
          value: {
            stepId: command.stepId,
            step: open.step,
            attempt: command.attempt,
            upstreamStatus: command.upstreamStatus,
            retryAfterMs: command.retryAfterMs,
            wastedInputTokens: command.wastedInputTokens,
            keyId: command.keyId,
            route: command.route,
          },
        },
      ];
    }
    case "TripRun":
      if (state.status === RunStatus.Held || state.status === RunStatus.Stopped) return [];
      return [{ $case: "runTripped", value: { trip: command.trip, action: actionOf(command.action) } }];
    case "HoldByRule":
      return decideHoldByRule(command, state);
    case "ParkCall":
      // Resumed (or never held) meanwhile: nothing to park, the call goes on.
      if (state.status !== RunStatus.Held || state.parked.has(command.parkId)) return [];
      return [
        {
          $case: "callParked",
          value: {
            parkId: command.parkId,
            api: command.api,
            model: command.model,
            stream: command.stream,
            gateway: command.gateway,
          },
        },
      ];
    case "UnparkCall":
      if (!state.parked.has(command.parkId)) return [];
      return [
        {
          $case: "callUnparked",
          value: { parkId: command.parkId, how: command.how, parkedMs: command.parkedMs },
        },
      ];
  }
}

/** What ToolCallGated and LoopDetected share. */
interface GateCommon {
  readonly gateId: string;
  readonly stepId: string;
  readonly step: number;
  readonly api: Api;
  readonly model: string;
  readonly stream: boolean;
  readonly action: RunAction;
  readonly requestHash: string;
  readonly answerHash: string;
  readonly promptHash: string;
  readonly gateway: string;
}

function decideGate(command: GateAnswer, state: RunState): EventPayload[] {
  // Gated already (a retried append), or even decided since: nothing more.
  if (state.gates.has(command.gateId) || state.gateDecisions.has(command.gateId)) return [];
  const common: GateCommon = {
    gateId: command.gateId,
    stepId: command.stepId,
    step: command.step,
    api: command.api,
    model: command.model,
    stream: command.stream,
    action: actionOf(command.action),
    requestHash: command.requestHash,
    answerHash: command.answerHash,
    promptHash: command.promptHash,
    gateway: command.gateway,
  };
  // The run was stopped (by an operator, or a limit) while the call was in flight: nothing
  // can follow on it, so the answer is refused at once rather than left for an operator.
  const runStopped = state.status === RunStatus.Stopped && !heldByGate(state);
  const match = command.match;
  return match.kind === "gate"
    ? gatedEvent(command, match, common, runStopped)
    : loopEvent(command, match, common, runStopped);
}

function gatedEvent(
  command: GateAnswer,
  match: Extract<GateAnswer["match"], { kind: "gate" }>,
  common: GateCommon,
  runStopped: boolean,
): EventPayload[] {
  return [
    {
      $case: "toolCallGated",
      value: {
        ...common,
        runStopped,
        toolCall: match.toolCall,
        toolCalls: [...command.toolCalls],
        toolCallsOmitted: command.toolCallsOmitted ?? 0,
        rule: match.rule,
        ruleText: match.ruleText,
        actor: { kind: ActorKind.ACTOR_KIND_GATE, name: match.rule },
      },
    },
  ];
}

function loopEvent(
  command: GateAnswer,
  match: Extract<GateAnswer["match"], { kind: "loop" }>,
  common: GateCommon,
  runStopped: boolean,
): EventPayload[] {
  return [
    {
      $case: "loopDetected",
      value: {
        ...common,
        runStopped,
        toolCalls: [...command.toolCalls],
        toolCallsOmitted: command.toolCallsOmitted ?? 0,
        repeats: match.repeats,
        maxRepeats: match.maxRepeats,
        toolCallsSignature: match.signature,
        actor: { kind: ActorKind.ACTOR_KIND_GATE, name: LOOP_RULE },
      },
    },
  ];
}

/** The held answers an approval or denial is about; none is an error the operator sees. */
function gatesNamed(state: RunState, gateId: string | undefined): PendingGate[] {
  if (gateId === undefined || gateId === "") {
    if (state.gates.size === 0) throw new NothingGatedError(state.runId);
    return [...state.gates.values()];
  }
  const gate = state.gates.get(gateId);
  if (gate === undefined) {
    // Decided already (a retry): nothing more to do.
    if (state.gateDecisions.has(gateId)) return [];
    throw new NothingGatedError(state.runId, gateId);
  }
  return [gate];
}

function denyAll(state: RunState, actor: Actor, reason: string, runStopped: boolean): EventPayload[] {
  return [...state.gates.values()].map((gate) => denial(gate, actor, reason, runStopped));
}

function denial(gate: PendingGate, actor: Actor, reason: string, runStopped: boolean): EventPayload {
  return {
    $case: "toolCallDenied",
    value: { gateId: gate.gateId, stepId: gate.stepId, step: gate.step, actor, reason, runStopped },
  };
}

/** The hold of the first standing rule that matches the run (and the call), if one does. */
function holdByRule(
  rules: readonly HoldRule[],
  state: RunState,
  call: { readonly tag: string; readonly model: string; readonly promptHash: string },
): EventPayload[] {
  const rule = ruleHolding(rules, state, {
    runId: state.runId,
    tag: call.tag,
    model: call.model,
    promptHash: call.promptHash,
  });
  if (rule === undefined) return [];
  return [
    { $case: "runHeldByRule", value: { ruleId: rule.ruleId, reason: rule.reason, selector: rule.selector } },
  ];
}

function decideHoldByRule(command: HoldByRule, state: RunState): EventPayload[] {
  if (state.status === RunStatus.Held || state.status === RunStatus.Stopped) return [];
  return holdByRule(command.rules, state, { tag: command.tag, model: "", promptHash: "" });
}

function decideStart(command: StartStep, state: RunState, nowMs: number): EventPayload[] {
  if (state.open.has(command.stepId)) return [];
  if (state.status === RunStatus.Stopped) throw new RunStoppedError(state.runId);
  if (state.status === RunStatus.Held) throw new RunHeldError(state.runId);

  const held = holdByRule(command.rules, state, command);
  if (held.length > 0) return held;

  const room = headroom(command.limits, state, command, nowMs);
  if (room.kind === "crossed") {
    return [{ $case: "runTripped", value: { trip: room.trip, action: actionOf(command.limits.onTrip) } }];
  }
  if (room.kind === "busy") throw new RunBusyError(state.runId);

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
        promptHash: command.promptHash,
        reservedNanoUsd: command.reservedNanoUsd,
        budgetLeases: [...command.budgetLeases],
        prediction: command.prediction,
        route: command.route,
        origin: command.origin,
      },
    },
  ];
}

function actionOf(action: "hold" | "stop"): RunAction {
  return action === "stop" ? RunAction.RUN_ACTION_STOP : RunAction.RUN_ACTION_HOLD;
}

/** The run is held by a rate-limit checkpoint, and by nothing since. */
export function heldByCheckpoint(state: RunState): boolean {
  return (
    state.status === RunStatus.Held &&
    state.hold?.kind === "trip" &&
    state.hold.trip?.limit === LimitKind.LIMIT_KIND_RATE_LIMIT
  );
}

/** Texts held to their bounds, remembering whether any was cut. */
class Bounded {
  constructor(public cut: boolean) {}

  text(text: string, max: number): string {
    if (text.length <= max) return text;
    this.cut = true;
    return boundText(text, max);
  }
}
