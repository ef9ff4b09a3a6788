import { Envelope } from "@holdfast/proto";
import { EventDecodeError } from "./errors.js";

/** The schema version this code writes. Readers accept it and every earlier one. */
export const SCHEMA_VERSION = 1;

export type EventPayload = NonNullable<Envelope["payload"]>;
export type PayloadCase = EventPayload["$case"];

const TYPE_OF_CASE = {
  stepStarted: "StepStarted",
  stepCompleted: "StepCompleted",
  stepFailed: "StepFailed",
} as const satisfies Record<PayloadCase, string>;

/** Past-tense event type names, as they appear in subjects and the envelope. */
export type EventType = (typeof TYPE_OF_CASE)[PayloadCase];
export const EVENT_TYPES = Object.values(TYPE_OF_CASE) as readonly EventType[];

export function eventTypeOf(payload: EventPayload): EventType {
  return TYPE_OF_CASE[payload.$case];
}

export interface NewEvent {
  id: string;
  runId: string;
  sequence: number;
  timestampMs: number;
  tag: string;
  payload: EventPayload;
}

export function makeEnvelope(event: NewEvent): Envelope {
  return {
    id: event.id,
    type: eventTypeOf(event.payload),
    schemaVersion: SCHEMA_VERSION,
    runId: event.runId,
    sequence: event.sequence,
    timestampMs: event.timestampMs,
    tag: event.tag,
    payload: event.payload,
  };
}

export function encodeEnvelope(envelope: Envelope): Uint8Array {
  return Envelope.encode(envelope).finish();
}

/** A decoded envelope whose payload is known to be present. */
export type DecodedEnvelope = Envelope & { payload: EventPayload };

/**
 * Decodes and checks an event. An event from a newer schema, or whose type and payload
 * disagree, is refused rather than half-understood.
 */
export function decodeEnvelope(bytes: Uint8Array): DecodedEnvelope {
  let envelope: Envelope;
  try {
    envelope = Envelope.decode(bytes);
  } catch (cause) {
    throw new EventDecodeError("event is not a valid protobuf Envelope", { cause });
  }
  const { payload } = envelope;
  if (payload === undefined) {
    throw new EventDecodeError(
      `event ${envelope.id} (type "${envelope.type}") has no payload this version knows`,
    );
  }
  if (envelope.schemaVersion < 1 || envelope.schemaVersion > SCHEMA_VERSION) {
    throw new EventDecodeError(
      `event ${envelope.id} has schema version ${envelope.schemaVersion}; this version reads 1..${SCHEMA_VERSION}`,
    );
  }
  if (eventTypeOf(payload) !== envelope.type) {
    throw new EventDecodeError(
      `event ${envelope.id} says type "${envelope.type}" but carries ${eventTypeOf(payload)}`,
    );
  }
  return envelope as DecodedEnvelope;
}

/** The canonical JSON form (proto3 JSON mapping): for CLI output and the analytics copy. */
export function envelopeToJson(envelope: Envelope): Record<string, unknown> {
  return Envelope.toJSON(envelope) as Record<string, unknown>;
}
