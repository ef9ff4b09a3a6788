import { Envelope } from "@holdfast/proto";
import { decodeEnvelope, isKnown, type StoredEnvelope } from "./envelope.js";
import { EventDecodeError } from "./errors.js";
import { runIdFromToken, type Subjects, tokenOf } from "./subjects.js";

/**
 * Why a reader set an event aside instead of using it. A fixed set, so it can label a
 * metric: the decode failures (`undecodable`, `invalid_envelope`, `type_mismatch`,
 * `out_of_range`; see DecodeFailure); `wrong_subject`, an envelope whose run or type is
 * not what the subject it was stored on names (the subject is what NATS permissions
 * check, so the envelope may not claim another); `out_of_sequence`, a run's event that is
 * not its next (its sequence jumps past a gap in the log itself, or repeats one the run
 * already has).
 */
export const QUARANTINE_REASONS = [
  "undecodable",
  "invalid_envelope",
  "type_mismatch",
  "out_of_range",
  "wrong_subject",
  "out_of_sequence",
] as const;

export type QuarantineReason = (typeof QUARANTINE_REASONS)[number];

/**
 * An event of the log a reader could not use, kept as it was stored with the reason. The
 * log is append-only, so the event itself stays findable by its stream sequence for ever.
 */
export interface QuarantinedEvent {
  readonly streamSequence: number;
  readonly subject: string;
  /** The run as the subject names it ("" for a provider key's or an agent's event). */
  readonly runId: string;
  /** The event type as the subject names it. */
  readonly type: string;
  readonly reason: QuarantineReason;
  /** What was wrong, in words (bounded: it quotes what the event claims). */
  readonly detail: string;
  /** The bytes as stored (out of sequence: the event as it decoded, encoded again). */
  readonly data: Uint8Array;
}

/** An event as the log holds it: one a reader can fold (known or not), or one it sets aside. */
export type StoredOrQuarantined =
  | { readonly envelope: StoredEnvelope; readonly quarantined?: undefined }
  | { readonly envelope?: undefined; readonly quarantined: QuarantinedEvent };

/** A stored message: where it is in the stream, its subject and its bytes. */
export interface StoredBytes {
  readonly seq: number;
  readonly subject: string;
  readonly data: Uint8Array;
}

/**
 * Reads one stored message as an event, never throwing: what cannot be used (bytes that
 * are no envelope, a type its payload disagrees with, an integer a number cannot hold,
 * an envelope claiming another run or type than its subject) comes back quarantined.
 * Every reader of the log goes through here (the bus's reads, watches and consumers).
 */
export function decodeStored(subjects: Subjects, message: StoredBytes): StoredOrQuarantined {
  const place = subjects.placeOf(message.subject);
  const quarantine = (reason: QuarantineReason, detail: string): StoredOrQuarantined => ({
    quarantined: {
      streamSequence: message.seq,
      subject: message.subject,
      runId: place?.kind === "run" ? runIdFromToken(place.token) : "",
      type: place?.type ?? "",
      reason,
      detail: bounded(detail),
      data: message.data,
    },
  });
  let envelope: StoredEnvelope;
  try {
    envelope = decodeEnvelope(message.data);
  } catch (error) {
    if (error instanceof EventDecodeError) return quarantine(error.reason, error.message);
    return quarantine("undecodable", `event could not be decoded: ${(error as Error).message}`);
  }
  if (place === undefined) {
    return quarantine("wrong_subject", `stored on ${quote(message.subject)}, no subject of a Holdfast event`);
  }
  if (envelope.type !== place.type) {
    return quarantine(
      "wrong_subject",
      `event says type ${quote(envelope.type)} but was stored on a ${place.type} subject`,
    );
  }
  if (place.kind === "run" ? tokenOf(envelope.runId) !== place.token : envelope.runId !== "") {
    return quarantine(
      "wrong_subject",
      `event says run ${quote(envelope.runId)} but was stored on ${quote(message.subject)}`,
    );
  }
  return { envelope };
}

/**
 * A run's event that is not its next, as a fold of the run's whole history from the log
 * finds it: past a gap (nothing in the log fills it), or at a sequence the run already
 * has. Not applied; the run's next event still is.
 */
export function outOfSequence(
  envelope: StoredEnvelope,
  where: { streamSequence: number; subject: string },
  lastSequence: number,
): QuarantinedEvent {
  return {
    streamSequence: where.streamSequence,
    subject: where.subject,
    runId: envelope.runId,
    type: envelope.type,
    reason: "out_of_sequence",
    detail:
      envelope.sequence > lastSequence
        ? `run sequence ${envelope.sequence} where ${lastSequence + 1} was next`
        : `run sequence ${envelope.sequence} repeats one the run already has (its last is ${lastSequence})`,
    data: Envelope.encode({
      id: envelope.id,
      type: envelope.type,
      schemaVersion: envelope.schemaVersion,
      runId: envelope.runId,
      sequence: envelope.sequence,
      timestampMs: envelope.timestampMs,
      tag: envelope.tag,
      tenant: envelope.tenant,
      payload: isKnown(envelope) ? envelope.payload : undefined,
    }).finish(),
  };
}

/** The first `bytes` bytes in hex, "…" after them when there are more: enough to recognise an event by. */
export function quarantinePreview(data: Uint8Array, bytes = 24): string {
  const hex = Buffer.from(data.subarray(0, bytes)).toString("hex");
  return data.length > bytes ? `${hex}…` : hex;
}

// What an event claims is quoted, never more than this much of it: a line per event, not a page.
const QUOTED = 80;
const DETAIL = 400;

function quote(text: string): string {
  return JSON.stringify(text.length > QUOTED ? `${text.slice(0, QUOTED)}…` : text);
}

function bounded(text: string): string {
  return text.length > DETAIL ? `${text.slice(0, DETAIL)}…` : text;
}
