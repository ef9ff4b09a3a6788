import type { EventType } from "./envelope.js";
import { InvalidRunIdError } from "./errors.js";

/** Longest run id Holdfast accepts, in UTF-16 code units. */
export const MAX_RUN_ID_LENGTH = 256;

// Ids made only of these characters, not starting with "_", are used as they are, so an
// operator can read them in a subject; anything else is base64url-encoded behind "_".
// The "_" prefix keeps the two forms from ever colliding.
const PLAIN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;
/**
 * C0 and C1 control characters and DEL: never part of a run id or a tag, since they
 * corrupt every terminal, log and table they reach.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what this rejects
export const CONTROL_CHARACTER = /[\u0000-\u001f\u007f-\u009f]/;

/** Throws InvalidRunIdError unless `runId` can name a run. */
export function assertRunId(runId: string): void {
  if (runId.length === 0) throw new InvalidRunIdError("run id is empty");
  if (runId.length > MAX_RUN_ID_LENGTH) {
    throw new InvalidRunIdError(`run id is ${runId.length} characters; the limit is ${MAX_RUN_ID_LENGTH}`);
  }
  if (CONTROL_CHARACTER.test(runId)) throw new InvalidRunIdError("run id contains a control character");
}

/**
 * The NATS subject token for a run id. Distinct ids always give distinct tokens, and a
 * token never contains ".", "*", ">", whitespace or non-ASCII, whatever the id holds.
 */
export function runToken(runId: string): string {
  assertRunId(runId);
  if (PLAIN.test(runId)) return runId;
  return `_${Buffer.from(runId, "utf8").toString("base64url")}`;
}

/** Inverse of runToken. */
export function runIdFromToken(token: string): string {
  return token.startsWith("_") ? Buffer.from(token.slice(1), "base64url").toString("utf8") : token;
}

/** Subjects and stream names under one prefix (one Holdfast deployment, or one test). */
export interface Subjects {
  readonly prefix: string;
  /** The JetStream stream holding every run's events. */
  readonly eventsStream: string;
  /** Matches every run event. */
  readonly allRuns: string;
  /** Matches every event of one type, across runs (what an alert consumer subscribes to). */
  ofType(type: EventType): string;
  /** The subject one event of a run is appended on. */
  runEvent(runId: string, type: EventType): string;
  /** Matches every event of one run; also the expected-last-sequence scope for appends. */
  run(runId: string): string;
  /** The run id an event subject belongs to. */
  runIdOf(subject: string): string;
}

const PREFIX = /^[a-z][a-z0-9_]{0,31}$/;

export function subjects(prefix: string): Subjects {
  if (!PREFIX.test(prefix)) throw new Error(`subject prefix "${prefix}" must match ${PREFIX}`);
  const base = `${prefix}.run.`;
  return {
    prefix,
    eventsStream: `${prefix.toUpperCase()}_EVENTS`,
    allRuns: `${base}>`,
    ofType: (type) => `${base}*.${type}`,
    runEvent: (runId, type) => `${base}${runToken(runId)}.${type}`,
    run: (runId) => `${base}${runToken(runId)}.*`,
    runIdOf: (subject) => {
      const token = subject.slice(base.length, subject.lastIndexOf("."));
      return runIdFromToken(token);
    },
  };
}
