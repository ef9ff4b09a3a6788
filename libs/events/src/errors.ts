/** Errors of the event model. `retryable` says whether trying again can help. */
export abstract class EventsError extends Error {
  abstract readonly code: string;
  abstract readonly retryable: boolean;
}

/**
 * A run id (or tag) that cannot name a run: empty, too long, not well-formed Unicode, or
 * with control characters.
 */
export class InvalidRunIdError extends EventsError {
  override readonly name = "InvalidRunIdError";
  readonly code = "HOLDFAST_INVALID_RUN_ID";
  readonly retryable = false;
}

/** Bytes that are not a Holdfast event this version understands. */
export class EventDecodeError extends EventsError {
  override readonly name = "EventDecodeError";
  readonly code = "HOLDFAST_EVENT_UNDECODABLE";
  readonly retryable = false;
}
