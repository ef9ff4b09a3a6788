import {
  type Actor,
  ActorKind,
  type Api,
  CompactionMode,
  RunAction,
  RunSource,
  type StepOutcome,
  type Trip,
  type Usage,
  type WindowLimits,
} from "@holdfast/proto";
import { isKnown, type StoredEnvelope } from "../envelope.js";
import { type DurableState, evolveDurable } from "./durable.js";

/**
 * Where a run is in its life. `running` and `idle` follow its calls (one in flight or
 * none); `held` and `stopped` are set by a trip, an operator or a standing rule and kept,
 * whatever the calls in flight do, until a resume lifts them.
 */
export enum RunStatus {
  New = "new",
  Running = "running",
  Idle = "idle",
  Held = "held",
  Stopped = "stopped",
}

/** A step whose call is in flight: what deciding its outcome needs. */
export interface OpenStep {
  readonly stepId: string;
  readonly step: number;
  readonly api: Api;
  readonly model: string;
  readonly stream: boolean;
  /** The gateway process that handles the call ("<instance id>#<boot id>"). */
  readonly gateway: string;
  /** Upstream origin the call went to. */
  readonly upstream: string;
  readonly startedMs: number;
  readonly estimatedInputTokens: number;
  /** Cost reserved against the run's limits while the call is in flight. */
  readonly reservedNanoUsd: number;
  /** 1, or the attempt the last retry after a 429 started. */
  readonly attempt: number;
}

/** A call of a held run, parked on a gateway. */
export interface ParkedCall {
  readonly parkId: string;
  readonly gateway: string;
  readonly sinceMs: number;
}

export interface RunTotals {
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly cachedInputTokens: number;
  readonly cacheWriteTokens: number;
  readonly reasoningTokens: number;
  /** Sum over steps whose cost is known (saturated at MAX_NANO_USD). */
  readonly costNanoUsd: number;
  /** Finished steps whose cost is unknown: the run's cost is then a lower bound. */
  readonly unpricedSteps: number;
  /**
   * Finished steps whose cost is Holdfast's estimate: their usage was (their outcome lost,
   * the provider's report unusable or cut short), or their model was charged at the unknown rate.
   */
  readonly estimatedSteps: number;
  /** Calls sent again after a 429 slipped past prediction, and the input tokens they re-sent. */
  readonly retries: number;
  readonly wastedInputTokens: number;
}

/**
 * The stretch of a run its per-run limits apply to: from its first event, then from each
 * resume. A resume may set the window's own limits.
 */
export interface RunWindow {
  readonly startedMs: number;
  readonly steps: number;
  /** Known cost of the window's finished steps (saturated at MAX_NANO_USD). */
  readonly costNanoUsd: number;
  /** Limits a resume set for this window (0: the configured one); null when none did. */
  readonly limits: WindowLimits | null;
  /** The operator set limits for this window: budgets across runs do not hold it. */
  readonly overrides: boolean;
  /** The step whose outcome was folded last (the one that crossed a cost limit, if one was). */
  readonly lastFinishedStepId: string;
}

/** An answer the tool-call gate holds until an operator approves or denies it. */
export interface PendingGate {
  readonly gateId: string;
  readonly stepId: string;
  readonly step: number;
  /** A tool_gate rule matched, or the same tool calls came max_repeated_tool_calls times in a row. */
  readonly kind: "gate" | "loop";
  /** The tool (the first one, for a loop) and the rule's key. */
  readonly tool: string;
  readonly rule: string;
  /** What the gate did to the run: held it, or stopped it (on_match: stop). */
  readonly action: "hold" | "stop";
  readonly sinceMs: number;
  readonly gateway: string;
}

/** What became of a held answer: approved, denied, or abandoned (nobody left to take it). */
export interface GateDecision {
  readonly gateId: string;
  readonly approved: boolean;
  readonly abandoned: boolean;
  readonly reason: string;
}

/** The answers in a row that asked for the same tool calls (loop detection). */
export interface ToolRepeat {
  /** Signature of those calls; empty when the last answer asked for none (or after a decision). */
  readonly signature: string;
  readonly count: number;
  /** The step whose outcome was counted last. */
  readonly stepId: string;
}

/** Why a run is held or stopped, while it is. */
export interface RunHold {
  readonly kind: "trip" | "operator" | "rule" | "gate" | "loop";
  readonly action: "hold" | "stop";
  readonly sinceMs: number;
  readonly actor: Actor | undefined;
  readonly reason: string;
  readonly trip: Trip | undefined;
  readonly ruleId: string;
}

/**
 * A run as its deciders need it, folded from its events. Each event costs O(1) whatever
 * the run's length (only the calls in flight, the parked ones and the last minute's
 * token counts are kept item by item); the whole history, for people, is `describeRun`.
 */
/** What stands for the oldest messages of a compacted conversation. */
export interface Compaction {
  readonly mode: CompactionMode;
  /** Hex digest of the messages replaced (their JSON), and how many they are. */
  readonly prefixHash: string;
  readonly prefixMessages: number;
  /** The messages that stand for them, a JSON array in the calls' API shape. */
  readonly replacementJson: string;
}

export interface RunState {
  readonly runId: string;
  readonly status: RunStatus;
  readonly tag: string;
  readonly tenant: string;
  readonly identifiedBy: {
    readonly source: RunSource;
    readonly key: string;
    readonly fingerprint: string;
    readonly generation: number;
  } | null;
  /** The model of the latest step. */
  readonly model: string;
  /** The conversation prefix hash of the latest step. */
  readonly promptHash: string;
  /** Sequence of the last event folded in; the next event must carry lastSequence + 1. */
  readonly lastSequence: number;
  readonly firstSeenMs: number | null;
  readonly lastSeenMs: number | null;
  /** Steps started so far; the next one is number `started + 1`. */
  readonly started: number;
  readonly completed: number;
  readonly failed: number;
  /** Calls in flight, by step id. */
  readonly open: ReadonlyMap<string, OpenStep>;
  /** Calls parked on gateways, by park id. */
  readonly parked: ReadonlyMap<string, ParkedCall>;
  /** Message count of the latest step's request (a shrinking count starts a new loop). */
  readonly lastMessageCount: number;
  readonly totals: RunTotals;
  readonly window: RunWindow;
  /** Why the run is held or stopped; null while it is neither. */
  readonly hold: RunHold | null;
  /** When the run was last resumed: standing rules added before then do not hold it. */
  readonly lastResumedMs: number | null;
  /** Answers the tool-call gate holds, by gate id. */
  readonly gates: ReadonlyMap<string, PendingGate>;
  /** The latest decisions on held answers, by gate id (the last few only). */
  readonly gateDecisions: ReadonlyMap<string, GateDecision>;
  /** Answers in a row with the same tool calls. */
  readonly repeat: ToolRepeat;
  /**
   * Why the run is to be stopped once no answer is held any more: a held answer of a stop
   * gate (on_match: stop) was denied, or abandoned. Null when none was.
   */
  readonly gateStop: RunHold | null;
  /**
   * Tokens of steps finished in the last minute, oldest first, summed per second (for
   * max_tokens_per_minute): at most 61 entries.
   */
  readonly recentTokens: readonly { readonly ms: number; readonly tokens: number }[];
  /** Events of types or versions this code does not know, skipped. */
  readonly unknownEvents: number;
  /**
   * The conversation's compactions, oldest first: a later call is sent with each applied
   * in turn (the prefix each replaced, where its conversation starts with it, by what
   * stands for it). Empty when never compacted.
   */
  readonly compactions: readonly Compaction[];
  /** An operator's resume asked for the conversation to be compacted before the next call goes on. */
  readonly compactNext: CompactionMode;
  /** A durable run's own part (submitted over holdfast.v1.Runs); null for a run that only calls models. */
  readonly durable: DurableState | null;
}

const NO_TOTALS: RunTotals = Object.freeze({
  inputTokens: 0,
  outputTokens: 0,
  cachedInputTokens: 0,
  cacheWriteTokens: 0,
  reasoningTokens: 0,
  costNanoUsd: 0,
  unpricedSteps: 0,
  estimatedSteps: 0,
  retries: 0,
  wastedInputTokens: 0,
});

const NOTHING_OPEN: ReadonlyMap<string, OpenStep> = new Map();
const NOTHING_PARKED: ReadonlyMap<string, ParkedCall> = new Map();
const NOTHING_GATED: ReadonlyMap<string, PendingGate> = new Map();
const NO_DECISIONS: ReadonlyMap<string, GateDecision> = new Map();
const NO_REPEAT: ToolRepeat = Object.freeze({ signature: "", count: 0, stepId: "" });
// Decisions on held answers kept in a run's state: enough for a gateway to learn the fate
// of the answer it holds, and for a retried gate to be recognised.
const DECISIONS_KEPT = 16;
/** Why an answer gated on a run stopped while its call was in flight was refused. */
export const STOPPED_RUN = "the run is stopped";
/** The rule a loop hold names: the setting that bounds repeated tool calls. */
export const LOOP_RULE = "max_repeated_tool_calls";
const MINUTE_MS = 60_000;
/**
 * The most a sum of costs is, in nano-USD: what every reader decodes exactly from an event
 * that carries it (a trip's figures), 2^53 - 1. Sums saturate there rather than grow past.
 */
export const MAX_NANO_USD = Number.MAX_SAFE_INTEGER;
const addNano = (a: number, b: number): number => Math.min(MAX_NANO_USD, a + b);
/**
 * A step's cost as it counts: known, and never below zero (a reader tolerates what a writer
 * got wrong). Every reader that counts spend (the fold, the budgets, the projection) counts this.
 */
export const stepCostNanoUsd = (outcome: Pick<StepOutcome, "cost">): number =>
  outcome.cost?.known === true ? Math.max(0, outcome.cost.nanoUsd) : 0;
const costOf = stepCostNanoUsd;

export function initialState(runId: string): RunState {
  return {
    runId,
    status: RunStatus.New,
    tag: "",
    tenant: "",
    identifiedBy: null,
    model: "",
    promptHash: "",
    lastSequence: 0,
    firstSeenMs: null,
    lastSeenMs: null,
    started: 0,
    completed: 0,
    failed: 0,
    open: NOTHING_OPEN,
    parked: NOTHING_PARKED,
    lastMessageCount: 0,
    totals: NO_TOTALS,
    window: {
      startedMs: 0,
      steps: 0,
      costNanoUsd: 0,
      limits: null,
      overrides: false,
      lastFinishedStepId: "",
    },
    hold: null,
    lastResumedMs: null,
    gates: NOTHING_GATED,
    gateDecisions: NO_DECISIONS,
    repeat: NO_REPEAT,
    gateStop: null,
    recentTokens: [],
    unknownEvents: 0,
    compactions: [],
    compactNext: CompactionMode.COMPACTION_MODE_UNSPECIFIED,
    durable: null,
  };
}

/**
 * Folds one event into a run. Pure. An event at or below `lastSequence` was already
 * folded (a redelivery) and changes nothing, so folding is idempotent. One past
 * `lastSequence + 1` is not the run's next event and is not applied either: in a history
 * read from the log that is a gap nothing fills, and its readers quarantine it (a feed
 * that brings only some of the run's events reads the run instead). The run's next event
 * still applies. An event this code does not know still takes its place in the sequence.
 */
export function evolve(state: RunState, event: StoredEnvelope): RunState {
  if (event.sequence !== state.lastSequence + 1) return state;
  const at = event.timestampMs;
  const seen: RunState = {
    ...state,
    lastSequence: event.sequence,
    firstSeenMs: state.firstSeenMs ?? at,
    lastSeenMs: Math.max(state.lastSeenMs ?? at, at),
    tag: event.tag || state.tag,
    tenant: event.tenant || state.tenant,
    // The first window opens with the run.
    window: state.firstSeenMs === null ? { ...state.window, startedMs: at } : state.window,
  };
  if (!isKnown(event)) return { ...seen, unknownEvents: state.unknownEvents + 1 };
  const { payload } = event;
  switch (payload.$case) {
    case "stepStarted": {
      const e = payload.value;
      const open = new Map(state.open);
      open.set(e.stepId, {
        stepId: e.stepId,
        step: e.step,
        api: e.api,
        model: e.model,
        stream: e.stream,
        gateway: e.gateway,
        upstream: e.upstream,
        startedMs: at,
        estimatedInputTokens: e.estimatedInputTokens,
        reservedNanoUsd: e.reservedNanoUsd,
        attempt: 1,
      });
      const identity = e.identity;
      return withActivity({
        ...seen,
        model: e.model || state.model,
        promptHash: e.promptHash || state.promptHash,
        identifiedBy:
          state.identifiedBy ??
          (identity && identity.source !== RunSource.RUN_SOURCE_UNSPECIFIED
            ? {
                source: identity.source,
                key: identity.key,
                fingerprint: identity.fingerprint,
                generation: identity.generation,
              }
            : null),
        started: Math.max(state.started, e.step),
        open,
        lastMessageCount: e.messageCount,
        window: { ...seen.window, steps: seen.window.steps + 1 },
      });
    }
    case "stepCompleted":
    case "stepFailed": {
      const outcome = payload.value.outcome;
      if (outcome === undefined || !state.open.has(outcome.stepId)) return withActivity(seen);
      const open = new Map(state.open);
      open.delete(outcome.stepId);
      const completed = payload.$case === "stepCompleted";
      const repeat = completed
        ? repeatAfter(state.repeat, payload.value.toolCallsSignature, outcome.stepId)
        : state.repeat;
      const cost = costOf(outcome);
      const tokens = (outcome.usage?.inputTokens ?? 0) + (outcome.usage?.outputTokens ?? 0);
      return withActivity({
        ...seen,
        model: outcome.model || seen.model,
        open,
        completed: state.completed + (completed ? 1 : 0),
        failed: state.failed + (completed ? 0 : 1),
        totals: addOutcome(state.totals, outcome),
        window: {
          ...seen.window,
          costNanoUsd: addNano(seen.window.costNanoUsd, cost),
          lastFinishedStepId: outcome.stepId,
        },
        recentTokens: tokens > 0 ? withRecentTokens(state.recentTokens, at, tokens) : state.recentTokens,
        repeat,
      });
    }
    case "runTripped": {
      const e = payload.value;
      const action = e.action === RunAction.RUN_ACTION_STOP ? "stop" : "hold";
      return {
        ...seen,
        status: action === "stop" ? RunStatus.Stopped : RunStatus.Held,
        hold: { kind: "trip", action, sinceMs: at, actor: undefined, reason: "", trip: e.trip, ruleId: "" },
      };
    }
    case "runHeld":
    case "runHeldByRule": {
      // A stopped run stays stopped: holding it says nothing new (unless only a held
      // answer stops it: the operator's hold then outlasts the answer).
      if (state.status === RunStatus.Stopped && !heldByGate(state)) return seen;
      const byRule = payload.$case === "runHeldByRule";
      const e = payload.value;
      return {
        ...seen,
        status: RunStatus.Held,
        hold: {
          // A RunHeld naming a rule was how earlier versions recorded a rule's hold.
          kind: byRule || e.ruleId !== "" ? "rule" : "operator",
          action: "hold",
          sinceMs: at,
          actor: byRule ? { kind: ActorKind.ACTOR_KIND_RULE, name: e.ruleId } : payload.value.actor,
          reason: e.reason,
          trip: undefined,
          ruleId: e.ruleId,
        },
      };
    }
    case "runStopped": {
      const e = payload.value;
      return {
        ...seen,
        status: RunStatus.Stopped,
        hold: {
          kind: "operator",
          action: "stop",
          sinceMs: at,
          actor: e.actor,
          reason: e.reason,
          trip: undefined,
          ruleId: "",
        },
      };
    }
    case "runCompacted": {
      const e = payload.value;
      return withActivity({
        ...seen,
        compactNext: CompactionMode.COMPACTION_MODE_UNSPECIFIED,
        // One that found nothing to drop (an operator's, on a short conversation) replaces nothing.
        compactions:
          e.prefixMessages === 0
            ? seen.compactions
            : [
                ...seen.compactions,
                {
                  mode: e.mode,
                  prefixHash: e.prefixHash,
                  prefixMessages: e.prefixMessages,
                  replacementJson: e.replacementJson,
                },
              ],
      });
    }
    case "checkpointCleared":
      // The run goes on in the same window of limits.
      return withActivity({ ...seen, status: RunStatus.Idle, hold: null });
    case "runResumed": {
      const e = payload.value;
      // How earlier versions recorded a checkpoint's clearing.
      if (e.checkpoint) return withActivity({ ...seen, status: RunStatus.Idle, hold: null });
      return withActivity({
        ...seen,
        compactNext: e.compact ?? CompactionMode.COMPACTION_MODE_UNSPECIFIED,
        status: RunStatus.Idle,
        hold: null,
        lastResumedMs: at,
        window: {
          startedMs: at,
          steps: 0,
          costNanoUsd: 0,
          limits: e.limits ?? null,
          overrides: e.overrides,
          lastFinishedStepId: "",
        },
        recentTokens: [],
        repeat: NO_REPEAT,
        gateStop: null,
      });
    }
    case "toolCallGated":
    case "loopDetected": {
      const e = payload.value;
      const kind = payload.$case === "toolCallGated" ? "gate" : "loop";
      const action = e.action === RunAction.RUN_ACTION_STOP ? "stop" : "hold";
      const tool =
        payload.$case === "toolCallGated"
          ? (payload.value.toolCall?.name ?? "")
          : (payload.value.toolCalls[0]?.name ?? "");
      const rule = payload.$case === "toolCallGated" ? payload.value.rule : LOOP_RULE;
      if (e.runStopped) {
        // Refused as it was gated: the run was stopped while the call was in flight.
        return {
          ...seen,
          gateDecisions: withDecision(state.gateDecisions, e.gateId, false, false, STOPPED_RUN),
        };
      }
      const gates = new Map(state.gates);
      gates.set(e.gateId, {
        gateId: e.gateId,
        stepId: e.stepId,
        step: e.step,
        kind,
        tool,
        rule,
        action,
        sinceMs: at,
        gateway: e.gateway,
      });
      // A run already stopped stays as it is, one held by an operator, a rule or a limit
      // too (their hold outlasts the answer); a gate's own hold becomes a stop if this one stops.
      const gateHeld = state.hold?.kind === "gate" || state.hold?.kind === "loop";
      const takesOver =
        state.status !== RunStatus.Stopped &&
        (state.status !== RunStatus.Held || (gateHeld && action === "stop"));
      if (!takesOver) return { ...seen, gates };
      const reason =
        payload.$case === "toolCallGated"
          ? `${tool}: ${payload.value.ruleText}`
          : `${tool}: the same tool calls ${payload.value.repeats} times in a row`;
      return {
        ...seen,
        gates,
        status: action === "stop" ? RunStatus.Stopped : RunStatus.Held,
        hold: { kind, action, sinceMs: at, actor: e.actor, reason, trip: undefined, ruleId: rule },
      };
    }
    case "toolCallApproved":
    case "toolCallDenied":
    case "toolCallAbandoned": {
      const e = payload.value;
      const gate = state.gates.get(e.gateId);
      if (gate === undefined) return seen;
      const gates = new Map(state.gates);
      gates.delete(e.gateId);
      const approved = payload.$case === "toolCallApproved";
      const denied = payload.$case === "toolCallDenied" ? payload.value : undefined;
      const abandoned = payload.$case === "toolCallAbandoned" ? payload.value : undefined;
      const gateDecisions = withDecision(
        state.gateDecisions,
        e.gateId,
        approved,
        abandoned !== undefined,
        abandoned?.why ?? denied?.reason ?? (approved ? payload.value.reason : ""),
      );
      // A stop gate's answer denied (or left with nobody to take it): the run is to stay
      // stopped, for the reason of the first such answer.
      const stops = denied?.runStopped === true || (abandoned !== undefined && gate.action === "stop");
      const gateStop: RunHold | null =
        state.gateStop ??
        (stops
          ? {
              kind: denied !== undefined ? "operator" : "gate",
              action: "stop",
              sinceMs: at,
              actor: denied?.actor,
              reason:
                denied !== undefined
                  ? `${gate.tool} (${gate.rule}) denied${denied.reason ? `: ${denied.reason}` : ""}`
                  : `${gate.tool} (${gate.rule}): held answer abandoned (${abandoned?.why ?? ""})`,
              trip: undefined,
              ruleId: "",
            }
          : null);
      const decided: RunState = { ...seen, gates, gateDecisions, repeat: NO_REPEAT, gateStop };
      // Answers still held keep the run as it is.
      if (gates.size > 0) return decided;
      if (gateStop !== null) {
        // Stopped by someone else already: that stop stands.
        if (state.status === RunStatus.Stopped && !heldByGate(state)) return { ...decided, gateStop: null };
        return { ...decided, gateStop: null, status: RunStatus.Stopped, hold: gateStop };
      }
      // The last held answer is decided: a gate's hold ends, anyone else's stands.
      if (state.hold?.kind !== "gate" && state.hold?.kind !== "loop") return decided;
      return withActivity({ ...decided, status: RunStatus.Idle, hold: null });
    }
    case "callParked": {
      const e = payload.value;
      const parked = new Map(state.parked);
      parked.set(e.parkId, { parkId: e.parkId, gateway: e.gateway, sinceMs: at });
      return { ...seen, parked };
    }
    case "callUnparked": {
      const e = payload.value;
      if (!state.parked.has(e.parkId)) return seen;
      const parked = new Map(state.parked);
      parked.delete(e.parkId);
      return { ...seen, parked };
    }
    case "stepRetried": {
      const e = payload.value;
      const step = state.open.get(e.stepId);
      const open =
        step === undefined ? state.open : new Map(state.open).set(e.stepId, { ...step, attempt: e.attempt });
      return {
        ...seen,
        open,
        totals: {
          ...state.totals,
          retries: state.totals.retries + 1,
          wastedInputTokens: state.totals.wastedInputTokens + Number(e.wastedInputTokens),
        },
      };
    }
    case "holdRuleAdded":
    case "holdRuleLifted":
    case "rateLimitObserved":
    case "agentDeployed":
      // Fleet (provider key, agent) events: not about any one run.
      return seen;
    case "runSubmitted":
    case "runLeased":
    case "stepRecorded":
    case "runReleased":
    case "runFinished":
    case "runFailed":
    case "runRedriven":
      return { ...seen, durable: evolveDurable(state.durable, payload, at) ?? state.durable };
  }
}

/**
 * The last minute's token counts after a step finished at `at` with `tokens`: one entry
 * per second at most, so that folding an outcome costs the same whatever the run's pace
 * (one entry per step grew to every step of the last minute, copied at each). A second's
 * entry carries the time of its latest step and counts for as long as that one does: its
 * earlier steps are counted up to a second longer, never shorter.
 */
function withRecentTokens(
  entries: readonly { readonly ms: number; readonly tokens: number }[],
  at: number,
  tokens: number,
): { ms: number; tokens: number }[] {
  let first = 0;
  while (first < entries.length && entries[first]!.ms <= at - MINUTE_MS) first += 1;
  const last = entries.at(-1);
  if (
    last !== undefined &&
    first < entries.length &&
    Math.floor(last.ms / 1_000) === Math.floor(at / 1_000)
  ) {
    const kept = entries.slice(first, -1);
    kept.push({ ms: Math.max(last.ms, at), tokens: last.tokens + tokens });
    return kept;
  }
  const kept = entries.slice(first);
  kept.push({ ms: at, tokens });
  return kept;
}

/** The decisions kept, with one more (the oldest let go past DECISIONS_KEPT). */
function withDecision(
  decisions: ReadonlyMap<string, GateDecision>,
  gateId: string,
  approved: boolean,
  abandoned: boolean,
  reason: string,
): ReadonlyMap<string, GateDecision> {
  const next = new Map(decisions);
  next.set(gateId, { gateId, approved, abandoned, reason });
  if (next.size > DECISIONS_KEPT) next.delete(next.keys().next().value!);
  return next;
}

/**
 * The run is held (or stopped) by answers the tool-call gate holds, and by nobody else: a
 * gate's hold ends when they are decided, and an operator's hold or stop takes its place.
 */
export function heldByGate(state: RunState): boolean {
  return state.gates.size > 0 && (state.hold?.kind === "gate" || state.hold?.kind === "loop");
}

/** The answers in a row asking for the same tool calls, after one more answer. */
function repeatAfter(repeat: ToolRepeat, signature: string, stepId: string): ToolRepeat {
  if (signature === "") return { signature: "", count: 0, stepId };
  return { signature, count: signature === repeat.signature ? repeat.count + 1 : 1, stepId };
}

/** Tokens of the steps that finished in the minute before `nowMs`. */
export function tokensInLastMinute(state: RunState, nowMs: number): number {
  let sum = 0;
  for (const entry of state.recentTokens) if (entry.ms > nowMs - MINUTE_MS) sum += entry.tokens;
  return sum;
}

/** What the calls in flight have reserved against the run's limits. */
export function reservedNanoUsd(state: RunState): number {
  let sum = 0;
  for (const step of state.open.values()) sum = addNano(sum, Math.max(0, step.reservedNanoUsd));
  return sum;
}

function addOutcome(t: RunTotals, outcome: StepOutcome): RunTotals {
  const usage: Usage | undefined = outcome.usage;
  const known = outcome.cost?.known === true;
  return {
    inputTokens: t.inputTokens + (usage?.inputTokens ?? 0),
    outputTokens: t.outputTokens + (usage?.outputTokens ?? 0),
    cachedInputTokens: t.cachedInputTokens + (usage?.cachedInputTokens ?? 0),
    cacheWriteTokens: t.cacheWriteTokens + (usage?.cacheWriteTokens ?? 0),
    reasoningTokens: t.reasoningTokens + (usage?.reasoningTokens ?? 0),
    costNanoUsd: addNano(t.costNanoUsd, costOf(outcome)),
    unpricedSteps: t.unpricedSteps + (known ? 0 : 1),
    estimatedSteps: t.estimatedSteps + (outcome.estimated || outcome.unknownPrice ? 1 : 0),
    retries: t.retries,
    wastedInputTokens: t.wastedInputTokens,
  };
}

/** `running` while a call is in flight, `idle` when none is; held and stopped stay. */
function withActivity(state: RunState): RunState {
  const activity = state.open.size > 0 ? RunStatus.Running : RunStatus.Idle;
  switch (state.status) {
    case RunStatus.Held:
    case RunStatus.Stopped:
      return state;
    case RunStatus.New:
    case RunStatus.Running:
    case RunStatus.Idle:
      return state.status === activity ? state : { ...state, status: activity };
  }
}

/** Folds a run's events in order. */
export function foldRun(runId: string, events: Iterable<StoredEnvelope>): RunState {
  let state = initialState(runId);
  for (const event of events) state = evolve(state, event);
  return state;
}
