import {
  Envelope,
  type StepCompleted,
  type StepFailed,
  type StepOutcome,
  UsageEstimate,
} from "@holdfast/proto";
import { EventDecodeError } from "./errors.js";

export type EventPayload = NonNullable<Envelope["payload"]>;
export type PayloadCase = EventPayload["$case"];

const TYPE_OF_CASE = {
  stepStarted: "StepStarted",
  stepCompleted: "StepCompleted",
  stepFailed: "StepFailed",
  runTripped: "RunTripped",
  runHeld: "RunHeld",
  runResumed: "RunResumed",
  runStopped: "RunStopped",
  callParked: "CallParked",
  callUnparked: "CallUnparked",
  holdRuleAdded: "HoldRuleAdded",
  holdRuleLifted: "HoldRuleLifted",
  toolCallGated: "ToolCallGated",
  loopDetected: "LoopDetected",
  toolCallApproved: "ToolCallApproved",
  toolCallDenied: "ToolCallDenied",
  toolCallAbandoned: "ToolCallAbandoned",
  stepRetried: "StepRetried",
  rateLimitObserved: "RateLimitObserved",
  runCompacted: "RunCompacted",
  runSubmitted: "RunSubmitted",
  runLeased: "RunLeased",
  stepRecorded: "StepRecorded",
  runReleased: "RunReleased",
  runFinished: "RunFinished",
  runFailed: "RunFailed",
  runRedriven: "RunRedriven",
  agentDeployed: "AgentDeployed",
  runHeldByRule: "RunHeldByRule",
  checkpointCleared: "CheckpointCleared",
} as const satisfies Record<PayloadCase, string>;

/** Past-tense event type names, as they appear in subjects and the envelope. */
export type EventType = (typeof TYPE_OF_CASE)[PayloadCase];
export const EVENT_TYPES = Object.values(TYPE_OF_CASE) as readonly EventType[];

/**
 * The schema version this code writes, per event type. A reader accepts it and every
 * earlier one (upcast below); a later one is an event it does not know yet.
 */
export const SCHEMA_VERSIONS: Readonly<Record<EventType, number>> = {
  StepStarted: 1,
  // 2: the fields shared with StepFailed moved into `outcome`.
  StepCompleted: 2,
  StepFailed: 2,
  RunTripped: 1,
  RunHeld: 1,
  RunResumed: 1,
  RunStopped: 1,
  CallParked: 1,
  CallUnparked: 1,
  HoldRuleAdded: 1,
  HoldRuleLifted: 1,
  ToolCallGated: 1,
  LoopDetected: 1,
  ToolCallApproved: 1,
  ToolCallDenied: 1,
  ToolCallAbandoned: 1,
  StepRetried: 1,
  RateLimitObserved: 1,
  RunCompacted: 1,
  RunSubmitted: 1,
  RunLeased: 1,
  StepRecorded: 1,
  RunReleased: 1,
  RunFinished: 1,
  RunFailed: 1,
  RunRedriven: 1,
  AgentDeployed: 1,
  RunHeldByRule: 1,
  CheckpointCleared: 1,
};

/** Events about an agent (its deployments), not a run: on the agent's own subject, with no sequence. */
export const AGENT_EVENT_TYPES: ReadonlySet<string> = new Set<EventType>(["AgentDeployed"]);

/** Events about a provider key, not a run: appended on the key's own subject, with no sequence. */
export const KEY_EVENT_TYPES: ReadonlySet<string> = new Set<EventType>(["RateLimitObserved"]);

export function eventTypeOf(payload: EventPayload): EventType {
  return TYPE_OF_CASE[payload.$case];
}

export interface NewEvent {
  id: string;
  runId: string;
  sequence: number;
  timestampMs: number;
  tag: string;
  tenant?: string;
  payload: EventPayload;
}

export function makeEnvelope(event: NewEvent): DecodedEnvelope {
  const type = eventTypeOf(event.payload);
  return {
    id: event.id,
    type,
    schemaVersion: SCHEMA_VERSIONS[type],
    runId: event.runId,
    sequence: event.sequence,
    timestampMs: event.timestampMs,
    tag: event.tag,
    tenant: event.tenant ?? "",
    payload: event.payload,
  };
}

export function encodeEnvelope(envelope: Envelope): Uint8Array {
  return Envelope.encode(envelope).finish();
}

/** The furthest a JavaScript Date reaches from the epoch, either way (about 275,000 years). */
const MAX_DATE_MS = 8.64e15;

/** A decoded event this version knows, upcast to the version it writes. */
export type DecodedEnvelope = Envelope & { payload: EventPayload };

/**
 * An event this version cannot read: a type added by a later version, or a later schema
 * version of a known type. Its place in the run (sequence) still counts; its content is
 * skipped, and readers count what they skipped.
 */
export interface UnknownEvent {
  readonly id: string;
  readonly type: string;
  readonly schemaVersion: number;
  readonly runId: string;
  readonly sequence: number;
  readonly timestampMs: number;
  readonly tag: string;
  readonly tenant: string;
  readonly payload: undefined;
  readonly unknown: "type" | "version";
}

/** An event as read from the log: one this version knows, or one it skips. */
export type StoredEnvelope = DecodedEnvelope | UnknownEvent;

export function isKnown(event: StoredEnvelope): event is DecodedEnvelope {
  return event.payload !== undefined;
}

/**
 * Decodes and checks an event. Bytes that are not an envelope, whose type disagrees with
 * its payload, or that hold a number no reader can use (an integer past 2^53 - 1, a
 * timestamp no Date holds) are refused (EventDecodeError, with the reason; readers
 * quarantine them: see decodeStored); an event of a type or version this code does not know
 * comes back as an UnknownEvent, so adding an event type never requires upgrading every
 * reader first. Older versions are upcast to the current one.
 */
export function decodeEnvelope(bytes: Uint8Array): StoredEnvelope {
  let envelope: Envelope;
  try {
    envelope = Envelope.decode(bytes);
  } catch (cause) {
    // ts-proto reads 64-bit integers as numbers and refuses one a number cannot hold exactly.
    const message = (cause as Error).message;
    if (/SAFE_INTEGER/.test(message)) {
      throw new EventDecodeError("out_of_range", `event holds an integer beyond 2^53 - 1: ${message}`, {
        cause,
      });
    }
    throw new EventDecodeError("undecodable", `event is not a valid protobuf Envelope: ${message}`, {
      cause,
    });
  }
  // A provider key's or an agent's event (on its own subject) stands alone: it has no sequence.
  const standsAlone =
    envelope.runId === "" && (KEY_EVENT_TYPES.has(envelope.type) || AGENT_EVENT_TYPES.has(envelope.type));
  if (envelope.id === "" || envelope.type === "" || (envelope.sequence < 1 && !standsAlone)) {
    throw new EventDecodeError(
      "invalid_envelope",
      "event has no id, type or sequence: it is not a Holdfast envelope",
    );
  }
  if (Math.abs(envelope.timestampMs) > MAX_DATE_MS) {
    throw new EventDecodeError(
      "out_of_range",
      `event ${JSON.stringify(envelope.id)} has timestamp_ms ${envelope.timestampMs}, no date a reader can hold`,
    );
  }
  const { payload } = envelope;
  const known = SCHEMA_VERSIONS[envelope.type as EventType];
  if (payload === undefined || known === undefined) return unknownEvent(envelope, "type");
  if (eventTypeOf(payload) !== envelope.type) {
    throw new EventDecodeError(
      "type_mismatch",
      `event ${JSON.stringify(envelope.id)} says type ${JSON.stringify(envelope.type)} but carries ${eventTypeOf(payload)}`,
    );
  }
  if (envelope.schemaVersion > known) return unknownEvent(envelope, "version");
  if (envelope.schemaVersion < 1) {
    throw new EventDecodeError(
      "invalid_envelope",
      `event ${JSON.stringify(envelope.id)} has schema version ${envelope.schemaVersion}`,
    );
  }
  return upcast(envelope as DecodedEnvelope);
}

function unknownEvent(envelope: Envelope, unknown: UnknownEvent["unknown"]): UnknownEvent {
  return {
    id: envelope.id,
    type: envelope.type,
    schemaVersion: envelope.schemaVersion,
    runId: envelope.runId,
    sequence: envelope.sequence,
    timestampMs: envelope.timestampMs,
    tag: envelope.tag,
    tenant: envelope.tenant,
    payload: undefined,
    unknown,
  };
}

/** Brings an older version of an event to the one this code writes. */
function upcast(envelope: DecodedEnvelope): DecodedEnvelope {
  const { payload } = envelope;
  if (envelope.schemaVersion === SCHEMA_VERSIONS[envelope.type as EventType]) return envelope;
  switch (payload.$case) {
    case "stepCompleted":
    case "stepFailed":
      // Version 1 carried the outcome's fields flat on the event.
      return {
        ...envelope,
        schemaVersion: 2,
        payload: { ...payload, value: { ...payload.value, outcome: flatOutcome(payload.value) } },
      } as DecodedEnvelope;
    default:
      return envelope;
  }
}

function flatOutcome(v1: StepCompleted | StepFailed): StepOutcome {
  return {
    stepId: v1.stepId,
    step: v1.step,
    api: v1.api,
    model: v1.model,
    upstreamStatus: v1.upstreamStatus,
    usage: v1.usage,
    cost: v1.cost,
    latencyMs: v1.latencyMs,
    firstByteMs: v1.firstByteMs,
    stream: v1.stream,
    responseId: "",
    estimated: false,
    usageEstimate: UsageEstimate.USAGE_ESTIMATE_UNSPECIFIED,
    usageProblem: "",
    unknownPrice: false,
    truncated: false,
    abridged: false,
  };
}

/** The canonical JSON form (proto3 JSON mapping): for CLI output and the analytics copy. */
export function envelopeToJson(envelope: Envelope): Record<string, unknown> {
  return Envelope.toJSON(envelope) as Record<string, unknown>;
}
