import {
  type Actor,
  CompactionMode,
  compactionModeToJSON,
  type GatedToolCall,
  LimitKind,
  type Prediction,
  predictActionToJSON,
  type RouteChoice,
  routeReasonToJSON,
  routeStandingToJSON,
  type Selector,
  type Trip,
  type WindowLimits,
} from "@holdfast/proto";
import { isKnown, type StoredEnvelope } from "../envelope.js";
import { describeSelector } from "../fleet/selector.js";
import {
  actorName,
  apiName,
  failureReasonName,
  limitName,
  runSourceName,
  unparkName,
  usageEstimateName,
} from "../names.js";
import {
  outOfSequence,
  type QuarantinedEvent,
  type QuarantineReason,
  quarantinePreview,
} from "../quarantine.js";
import { evolve, initialState, type RunState, type RunTotals, STOPPED_RUN } from "./state.js";

export type StepStatus = "in_flight" | "completed" | "failed";

/** One step as people see it (`holdfast show`): names, not enum numbers. */
export interface StepView {
  stepId: string;
  step: number;
  status: StepStatus;
  api: string;
  /** Requested model, replaced by the model the provider says answered once known. */
  model: string;
  stream: boolean;
  messageCount: number;
  /** The conversation prefix hash of this call (model, system prompt, first message): what `hold --prompt` selects on. */
  promptHash: string;
  /** The recorded step an operator sent this call again from (replay, fork, compare), if one did. */
  origin: { kind: string; runId: string; step: number } | null;
  /** The gateway process that handled the call (instance id and boot id). */
  gateway: string;
  startedMs: number;
  finishedMs: number | null;
  upstreamStatus: number | null;
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  cacheWriteTokens: number;
  reasoningTokens: number;
  usageReported: boolean;
  /** Null while unknown (unpriced model, no usage reported, or still in flight). */
  costNanoUsd: number | null;
  /** Usage and cost are Holdfast's estimate, not the provider's report (`usageEstimate` says why). */
  estimated: boolean;
  /**
   * Why: "gateway_lost" (the outcome was lost with its gateway), "invalid" (the provider's
   * report could not be used), "missing" (it reported none, or its answer could not be
   * read), "partial" (the answer was cut off: output estimated from what was relayed); ""
   * when the usage is the provider's.
   */
  usageEstimate: string;
  /** What was wrong with the provider's usage report ("" when nothing was). */
  usageProblem: string;
  /** The model had no known price: the cost is its usage at pricing.unknown_usd_per_mtok. */
  unknownPrice: boolean;
  latencyMs: number | null;
  firstByteMs: number | null;
  responseId: string;
  finishReason: string;
  toolCalls: string[];
  /** Tool calls the answer asked for beyond those in `toolCalls` (which lists at most 128). */
  toolCallsOmitted: number;
  /** Something the provider said was longer than Holdfast records and was cut (a cut text ends in "…"). */
  truncated: boolean;
  /** The log refused the outcome as first decided: it was recorded without the provider's texts. */
  abridged: boolean;
  failure: { reason: string; errorType: string; errorCode: string; message: string } | null;
  /** What rate-limit prediction decided before the call, with its figures; null when it was off. */
  prediction: PredictionView | null;
  /** Where a call asking for a routed alias went, and why; null when the model is no alias. */
  route: RouteView | null;
  /**
   * Times the gateway sent the call again: after a 429 that slipped past prediction, or to
   * the next route target after one failed it (`route` says where).
   */
  retries: {
    attempt: number;
    upstreamStatus: number;
    retryAfterMs: number;
    wastedInputTokens: number;
    route: RouteView | null;
  }[];
}

/** A route choice as people read it. */
export interface RouteView {
  alias: string;
  /** The target's place in routes.<alias> (0 first), its origin, and the model asked of it. */
  target: number;
  upstream: string;
  model: string;
  /** "headroom", "soonest", "fallback", "probe" or "none_available". */
  reason: string;
  candidates: {
    target: number;
    /** "ready", "unknown", "wait", "cooling", "open", "too_large", "tried" or "probing". */
    standing: string;
    headroom: number;
    waitMs: number;
    untilMs: number;
  }[];
}

/** A rate-limit prediction as people read it. */
export interface PredictionView {
  /** "continue", "wait" or "checkpoint". */
  action: string;
  keyId: string;
  /** The window dimension that decided; "" when none constrained the call. */
  dimension: string;
  limit: number;
  remaining: number;
  needed: number;
  resetAtMs: number;
  estimatedInputTokens: number;
  estimatedOutputTokens: number;
  estimatedTotalTokens: number;
  sigma: number;
  k: number;
  waitedMs: number;
  resumeAtMs: number;
  exactInput: boolean;
}

/** A trip as people read it: which limit, its value, what was spent, in the limit's unit. */
export interface TripView {
  limit: string;
  limitValue: number;
  spentValue: number;
  budgetKey: string;
  period: string;
  crossedByStepId: string;
  /** A rate-limit checkpoint's prediction. */
  prediction: PredictionView | null;
}

/** Something that happened to the run besides its calls: trips, holds, resumes, stops, parked calls. */
export interface ControlView {
  sequence: number;
  atMs: number;
  what:
    | "tripped"
    | "held"
    | "resumed"
    | "stopped"
    | "parked"
    | "unparked"
    | "gated"
    | "loop"
    | "approved"
    | "denied"
    | "abandoned"
    | "compacted";
  /** For trips and stops by a limit: "hold" or "stop". */
  action: string;
  actor: string;
  reason: string;
  /** The selector the operator used, as typed (`--tag prod`); "" when by run id. */
  selector: string;
  ruleId: string;
  trip: TripView | null;
  /** For resumes: the window's own limits, when the operator set some. */
  limits: WindowLimits | null;
  parkId: string;
  /** For unparked calls: released, stopped, client_gone, gateway_lost. */
  how: string;
  gateway: string;
  /** For resumes: "summarize" or "truncate" when the operator asked for a compaction; "" otherwise. */
  compact: string;
  /** For compactions: what was made smaller, and how much. */
  compaction: CompactionView | null;
}

/** A compaction of the run's conversation as people read it. */
export interface CompactionView {
  /** "summarize" or "truncate". */
  mode: string;
  /** "too_large" (the call did not fit its key's whole window) or "operator". */
  why: string;
  stepId: string;
  messagesBefore: number;
  messagesAfter: number;
  bytesBefore: number;
  bytesAfter: number;
  tokensBefore: number;
  tokensAfter: number;
  /** The messages replaced, and what the summary call cost in tokens. */
  prefixMessages: number;
  summaryModel: string;
  summaryInputTokens: number;
  summaryOutputTokens: number;
}

/** An answer the tool-call gate held, and what became of it. */
export interface GateView {
  gateId: string;
  stepId: string;
  step: number;
  /** "gate": a tool_gate rule matched; "loop": the same tool calls max_repeated_tool_calls times in a row. */
  kind: "gate" | "loop";
  /** "abandoned": its client went away, or its gateway shut down, before anyone decided. */
  status: "pending" | "approved" | "denied" | "abandoned";
  /** What the model asked for: the tool the rule matched (the first, for a loop), with its arguments (redacted). */
  tool: string;
  arguments: string;
  /** Every tool call of the answer. */
  toolCalls: { id: string; name: string; arguments: string }[];
  /** The rule's key ("tool_gate.deny[0]", "max_repeated_tool_calls") and what it says. */
  rule: string;
  ruleText: string;
  /** What the gate did to the run: "hold" or "stop". */
  action: string;
  gatedMs: number;
  decidedMs: number | null;
  decidedBy: string;
  decisionReason: string;
  requestHash: string;
  answerHash: string;
}

/** A run as people see it: its state and every step, in order. */
export interface RunView {
  runId: string;
  status: string;
  /** Why it is held or stopped, while it is. */
  hold: {
    kind: string;
    action: string;
    sinceMs: number;
    actor: string;
    reason: string;
    ruleId: string;
    trip: TripView | null;
  } | null;
  promptHash: string;
  window: {
    startedMs: number;
    steps: number;
    costNanoUsd: number;
    limits: WindowLimits | null;
    overrides: boolean;
  };
  /** Calls parked on gateways right now, waiting for a resume or a stop. */
  parked: number;
  /** Trips, holds, resumes, stops and parked calls, in order. */
  control: ControlView[];
  /** Answers the tool-call gate held (pending ones too), in order. */
  gates: GateView[];
  tag: string;
  tenant: string;
  identifiedBy: { source: string; key: string; fingerprint: string; generation: number } | null;
  model: string;
  lastSequence: number;
  firstSeenMs: number | null;
  lastSeenMs: number | null;
  steps: StepView[];
  inFlight: number;
  completed: number;
  failed: number;
  totals: RunTotals;
  unknownEvents: number;
  /** Events of the run that were set aside, not folded (none in a healthy log), in log order. */
  quarantined: QuarantineView[];
}

/** An event of the run that was set aside: where the log keeps it and why it was not used. */
export interface QuarantineView {
  /** Its place in the stream, where it stays for ever; null when only its envelope was given. */
  streamSequence: number | null;
  /** The run sequence it claims (0 when it did not decode that far). */
  sequence: number;
  /** Its type as its subject (or, out of sequence, its envelope) names it. */
  type: string;
  reason: QuarantineReason;
  detail: string;
  bytes: number;
  /** Its first bytes in hex. */
  preview: string;
}

/**
 * A run's history as read from the log: its events at their places in the stream, and
 * the ones the read set aside (Bus.readRun's answer).
 */
export interface RunLog {
  readonly events: readonly { readonly envelope: StoredEnvelope; readonly streamSequence: number }[];
  readonly quarantined: readonly QuarantinedEvent[];
}

/**
 * The whole history of a run, for display. Built in one pass over its events (the steps
 * are accumulated in place, so a long run costs O(n), not O(n²)); deciders use the
 * O(1)-per-event RunState instead. Given the run's log, it lists what the read set aside,
 * and sets aside itself each event that is not the run's next (a history read whole from
 * the log has no redeliveries): both stay visible and neither is folded.
 */
export function describeRun(runId: string, history: Iterable<StoredEnvelope> | RunLog): RunView {
  let state: RunState = initialState(runId);
  const steps: StepView[] = [];
  const control: ControlView[] = [];
  const gates: GateView[] = [];
  const gateById = new Map<string, GateView>();
  const byId = new Map<string, StepView>();
  const quarantined: QuarantineView[] = isRunLog(history) ? history.quarantined.map(quarantineView) : [];
  for (const { envelope: event, streamSequence } of placed(history)) {
    if (event.sequence !== state.lastSequence + 1) {
      const set = outOfSequence(
        event,
        { streamSequence: streamSequence ?? 0, subject: "" },
        state.lastSequence,
      );
      quarantined.push({
        ...quarantineView(set),
        streamSequence,
        sequence: event.sequence,
        type: event.type,
      });
      continue;
    }
    state = evolve(state, event);
    if (!isKnown(event)) continue;
    const { payload } = event;
    const entry = (what: ControlView["what"], fields: Partial<ControlView>): void => {
      control.push({
        sequence: event.sequence,
        atMs: event.timestampMs,
        what,
        action: "",
        actor: "",
        reason: "",
        selector: "",
        ruleId: "",
        trip: null,
        limits: null,
        parkId: "",
        how: "",
        gateway: "",
        compact: "",
        compaction: null,
        ...fields,
      });
    };
    switch (payload.$case) {
      case "runTripped":
        entry("tripped", {
          action: payload.value.action === 2 ? "stop" : "hold",
          actor: payload.value.trip?.limit === LimitKind.LIMIT_KIND_RATE_LIMIT ? "predictor" : "limit",
          trip: tripView(payload.value.trip),
        });
        continue;
      case "runHeld":
        entry("held", {
          actor: actorLabel(payload.value.actor),
          reason: payload.value.reason,
          selector: selectorLabel(payload.value.selector),
          ruleId: payload.value.ruleId,
        });
        continue;
      case "runHeldByRule":
        entry("held", {
          actor: `rule (${payload.value.ruleId})`,
          reason: payload.value.reason,
          selector: selectorLabel(payload.value.selector),
          ruleId: payload.value.ruleId,
        });
        continue;
      case "checkpointCleared":
        entry("resumed", {
          actor: "predictor",
          reason: "the provider's window fits the next call again",
          gateway: payload.value.gateway,
        });
        continue;
      case "runResumed":
        entry("resumed", {
          actor: actorLabel(payload.value.actor),
          reason: payload.value.reason,
          selector: selectorLabel(payload.value.selector),
          limits: payload.value.limits ?? null,
          compact: compactionName(payload.value.compact),
        });
        continue;
      case "runCompacted": {
        const e = payload.value;
        entry("compacted", {
          gateway: e.gateway,
          compaction: {
            mode: compactionName(e.mode),
            why: e.why,
            stepId: e.stepId,
            messagesBefore: e.messagesBefore,
            messagesAfter: e.messagesAfter,
            bytesBefore: Number(e.bytesBefore),
            bytesAfter: Number(e.bytesAfter),
            tokensBefore: Number(e.tokensBefore),
            tokensAfter: Number(e.tokensAfter),
            prefixMessages: e.prefixMessages,
            summaryModel: e.summaryModel,
            summaryInputTokens: Number(e.summaryUsage?.inputTokens ?? 0),
            summaryOutputTokens: Number(e.summaryUsage?.outputTokens ?? 0),
          },
        });
        continue;
      }
      case "runStopped":
        entry("stopped", {
          actor: actorLabel(payload.value.actor),
          reason: payload.value.reason,
          selector: selectorLabel(payload.value.selector),
        });
        continue;
      case "callParked":
        entry("parked", { parkId: payload.value.parkId, gateway: payload.value.gateway });
        continue;
      case "callUnparked":
        entry("unparked", { parkId: payload.value.parkId, how: unparkName(payload.value.how) });
        continue;
      case "holdRuleAdded":
      case "holdRuleLifted":
      case "rateLimitObserved":
        continue;
      case "stepRetried": {
        const e = payload.value;
        byId.get(e.stepId)?.retries.push({
          attempt: e.attempt,
          upstreamStatus: e.upstreamStatus,
          retryAfterMs: Number(e.retryAfterMs),
          wastedInputTokens: Number(e.wastedInputTokens),
          route: routeView(e.route),
        });
        continue;
      }
      case "toolCallGated":
      case "loopDetected": {
        const e = payload.value;
        const gated = payload.$case === "toolCallGated" ? payload.value : undefined;
        const loop = payload.$case === "loopDetected" ? payload.value : undefined;
        const calls = e.toolCalls.map(toolCallView);
        const matched = gated?.toolCall === undefined ? calls[0] : toolCallView(gated.toolCall);
        const view: GateView = {
          gateId: e.gateId,
          stepId: e.stepId,
          step: e.step,
          kind: gated === undefined ? "loop" : "gate",
          status: "pending",
          tool: matched?.name ?? "",
          arguments: matched?.arguments ?? "",
          toolCalls: calls,
          rule: gated?.rule ?? "max_repeated_tool_calls",
          ruleText:
            gated?.ruleText ??
            `the same tool calls ${loop?.repeats ?? 0} times in a row (max_repeated_tool_calls: ${loop?.maxRepeats ?? 0})`,
          action: e.action === 2 ? "stop" : "hold",
          gatedMs: event.timestampMs,
          decidedMs: null,
          decidedBy: "",
          decisionReason: "",
          requestHash: e.requestHash,
          answerHash: e.answerHash,
        };
        gates.push(view);
        gateById.set(e.gateId, view);
        entry(gated === undefined ? "loop" : "gated", {
          action: view.action,
          actor: actorLabel(e.actor),
          reason: `${view.tool}: ${view.ruleText}`,
          ruleId: view.rule,
          gateway: e.gateway,
        });
        if (e.runStopped) {
          // Refused as it was gated: the run had been stopped while its call was in flight.
          view.status = "denied";
          view.decidedMs = event.timestampMs;
          view.decidedBy = actorLabel(e.actor);
          view.decisionReason = STOPPED_RUN;
          entry("denied", { actor: view.decidedBy, reason: STOPPED_RUN, ruleId: view.rule, action: "stop" });
        }
        continue;
      }
      case "toolCallApproved":
      case "toolCallDenied": {
        const e = payload.value;
        const approved = payload.$case === "toolCallApproved";
        const view = gateById.get(e.gateId);
        if (view !== undefined && view.status === "pending") {
          view.status = approved ? "approved" : "denied";
          view.decidedMs = event.timestampMs;
          view.decidedBy = actorLabel(e.actor);
          view.decisionReason = e.reason;
        }
        entry(approved ? "approved" : "denied", {
          actor: actorLabel(e.actor),
          reason: e.reason,
          ruleId: view?.rule ?? "",
          action: !approved && payload.value.runStopped ? "stop" : "",
        });
        continue;
      }
      case "toolCallAbandoned": {
        const e = payload.value;
        const view = gateById.get(e.gateId);
        if (view !== undefined && view.status === "pending") {
          view.status = "abandoned";
          view.decidedMs = event.timestampMs;
          view.decisionReason = e.why;
        }
        entry("abandoned", { reason: e.why, ruleId: view?.rule ?? "", gateway: e.gateway });
        continue;
      }
      case "stepCompleted":
      case "stepFailed":
      case "stepStarted":
        break;
    }
    if (payload.$case === "stepStarted") {
      const e = payload.value;
      const step: StepView = {
        stepId: e.stepId,
        step: e.step,
        status: "in_flight",
        api: apiName(e.api),
        model: e.model,
        stream: e.stream,
        messageCount: e.messageCount,
        promptHash: e.promptHash,
        origin:
          e.origin === undefined ? null : { kind: e.origin.kind, runId: e.origin.runId, step: e.origin.step },
        gateway: e.gateway,
        startedMs: event.timestampMs,
        finishedMs: null,
        upstreamStatus: null,
        inputTokens: 0,
        outputTokens: 0,
        cachedInputTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
        usageReported: false,
        costNanoUsd: null,
        estimated: false,
        usageEstimate: "",
        usageProblem: "",
        unknownPrice: false,
        latencyMs: null,
        firstByteMs: null,
        responseId: "",
        finishReason: "",
        toolCalls: [],
        toolCallsOmitted: 0,
        truncated: false,
        abridged: false,
        failure: null,
        prediction: predictionView(e.prediction),
        route: routeView(e.route),
        retries: [],
      };
      steps.push(step);
      byId.set(e.stepId, step);
      continue;
    }
    if (payload.$case !== "stepCompleted" && payload.$case !== "stepFailed") continue;
    const outcome = payload.value.outcome;
    const step = outcome === undefined ? undefined : byId.get(outcome.stepId);
    if (outcome === undefined || step === undefined || step.status !== "in_flight") continue;
    const usage = outcome.usage;
    step.status = payload.$case === "stepCompleted" ? "completed" : "failed";
    step.model = outcome.model || step.model;
    step.finishedMs = event.timestampMs;
    step.upstreamStatus = outcome.upstreamStatus === 0 ? null : outcome.upstreamStatus;
    step.inputTokens = usage?.inputTokens ?? 0;
    step.outputTokens = usage?.outputTokens ?? 0;
    step.cachedInputTokens = usage?.cachedInputTokens ?? 0;
    step.cacheWriteTokens = usage?.cacheWriteTokens ?? 0;
    step.reasoningTokens = usage?.reasoningTokens ?? 0;
    step.usageReported = usage?.reported ?? false;
    step.costNanoUsd = outcome.cost?.known ? outcome.cost.nanoUsd : null;
    step.estimated = outcome.estimated;
    step.usageEstimate = usageEstimateName(outcome.usageEstimate, outcome.estimated);
    step.usageProblem = outcome.usageProblem;
    step.unknownPrice = outcome.unknownPrice;
    step.latencyMs = outcome.latencyMs;
    step.firstByteMs = outcome.firstByteMs;
    step.responseId = outcome.responseId;
    step.truncated = outcome.truncated;
    step.abridged = outcome.abridged;
    if (payload.$case === "stepCompleted") {
      step.finishReason = payload.value.finishReason;
      step.toolCalls = [...payload.value.toolCalls];
      step.toolCallsOmitted = payload.value.toolCallsOmitted;
    } else {
      const f = payload.value;
      step.failure = {
        reason: failureReasonName(f.reason),
        errorType: f.errorType,
        errorCode: f.errorCode,
        message: f.errorMessage,
      };
    }
  }
  const id = state.identifiedBy;
  const hold = state.hold;
  return {
    runId,
    status: state.status,
    hold:
      hold === null
        ? null
        : {
            kind: hold.kind,
            action: hold.action,
            sinceMs: hold.sinceMs,
            actor: hold.kind === "trip" ? "limit" : actorLabel(hold.actor),
            reason: hold.reason,
            ruleId: hold.ruleId,
            trip: tripView(hold.trip),
          },
    promptHash: state.promptHash,
    window: {
      startedMs: state.window.startedMs,
      steps: state.window.steps,
      costNanoUsd: state.window.costNanoUsd,
      limits: state.window.limits,
      overrides: state.window.overrides,
    },
    parked: state.parked.size,
    control,
    gates,
    tag: state.tag,
    tenant: state.tenant,
    identifiedBy: id === null ? null : { ...id, source: runSourceName(id.source) },
    model: state.model,
    lastSequence: state.lastSequence,
    firstSeenMs: state.firstSeenMs,
    lastSeenMs: state.lastSeenMs,
    steps,
    inFlight: state.open.size,
    completed: state.completed,
    failed: state.failed,
    totals: state.totals,
    unknownEvents: state.unknownEvents,
    quarantined: quarantined.sort(
      (a, b) => (a.streamSequence ?? Number.MAX_SAFE_INTEGER) - (b.streamSequence ?? Number.MAX_SAFE_INTEGER),
    ),
  };
}

function isRunLog(history: Iterable<StoredEnvelope> | RunLog): history is RunLog {
  return !(Symbol.iterator in history);
}

function* placed(
  history: Iterable<StoredEnvelope> | RunLog,
): Iterable<{ envelope: StoredEnvelope; streamSequence: number | null }> {
  if (isRunLog(history)) {
    yield* history.events;
    return;
  }
  for (const envelope of history) yield { envelope, streamSequence: null };
}

function quarantineView(event: QuarantinedEvent): QuarantineView {
  return {
    streamSequence: event.streamSequence,
    sequence: 0,
    type: event.type,
    reason: event.reason,
    detail: event.detail,
    bytes: event.data.length,
    preview: quarantinePreview(event.data),
  };
}

function toolCallView(call: GatedToolCall): { id: string; name: string; arguments: string } {
  return { id: call.id, name: call.name, arguments: call.arguments };
}

function tripView(trip: Trip | undefined): TripView | null {
  if (trip === undefined) return null;
  return {
    limit: limitName(trip.limit),
    limitValue: trip.limitValue,
    spentValue: trip.spentValue,
    budgetKey: trip.budgetKey,
    period: trip.period,
    crossedByStepId: trip.crossedByStepId,
    prediction: predictionView(trip.prediction),
  };
}

function predictionView(prediction: Prediction | undefined): PredictionView | null {
  if (prediction === undefined) return null;
  return {
    ...prediction,
    action: predictActionToJSON(prediction.action)
      .replace(/^PREDICT_ACTION_/, "")
      .toLowerCase(),
    waitedMs: Number(prediction.waitedMs),
  };
}

function routeView(route: RouteChoice | undefined): RouteView | null {
  if (route === undefined) return null;
  return {
    alias: route.alias,
    target: route.target,
    upstream: route.upstream,
    model: route.model,
    reason: enumName(routeReasonToJSON(route.reason), "ROUTE_REASON_"),
    candidates: route.candidates.map((c) => ({
      target: c.target,
      standing: enumName(routeStandingToJSON(c.standing), "ROUTE_STANDING_"),
      headroom: c.headroom,
      waitMs: Number(c.waitMs),
      untilMs: c.untilMs,
    })),
  };
}

const enumName = (json: string, prefix: string): string => json.replace(prefix, "").toLowerCase();

const compactionName = (mode: CompactionMode | undefined): string =>
  mode === undefined || mode === CompactionMode.COMPACTION_MODE_UNSPECIFIED
    ? ""
    : enumName(compactionModeToJSON(mode), "COMPACTION_MODE_");

function actorLabel(actor: Actor | undefined): string {
  if (actor === undefined) return "";
  return actor.name === "" ? actorName(actor.kind) : `${actorName(actor.kind)} (${actor.name})`;
}

function selectorLabel(selector: Selector | undefined): string {
  return selector === undefined ? "" : describeSelector(selector);
}
