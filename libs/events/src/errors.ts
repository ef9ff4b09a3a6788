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

/**
 * Why bytes are not an event a reader can use: `undecodable`, not a protobuf Envelope;
 * `invalid_envelope`, an Envelope without an id, type, sequence or schema version;
 * `type_mismatch`, a type that disagrees with the payload it carries; `out_of_range`, an
 * integer past what a JavaScript number holds exactly (2^53 - 1).
 */
export type DecodeFailure = "undecodable" | "invalid_envelope" | "type_mismatch" | "out_of_range";

/** Bytes that are not a Holdfast event this version understands. */
export class EventDecodeError extends EventsError {
  override readonly name = "EventDecodeError";
  readonly code = "HOLDFAST_EVENT_UNDECODABLE";
  readonly retryable = false;
  constructor(
    readonly reason: DecodeFailure,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * A run is held: a call cannot start until it is resumed (the caller parks it). Carries
 * the run as it stands, so the caller can say why.
 */
export class RunHeldError extends EventsError {
  override readonly name = "RunHeldError";
  readonly code = "HOLDFAST_RUN_HELD";
  readonly retryable = true;
  constructor(readonly runId: string) {
    super(`run ${JSON.stringify(runId)} is held`);
  }
}

/** A run is stopped: its calls are refused (409) until it is resumed. */
export class RunStoppedError extends EventsError {
  override readonly name = "RunStoppedError";
  readonly code = "HOLDFAST_RUN_STOPPED";
  readonly retryable = false;
  constructor(readonly runId: string) {
    super(`run ${JSON.stringify(runId)} is stopped`);
  }
}

/**
 * A call cannot start yet: with what the run's calls in flight have reserved, it would
 * take the run past its cost limit, which only their outcomes can say it will not. The
 * caller waits for one of them to finish and asks again; a run with nothing in flight is
 * never busy (its next call is the one that may cross the limit).
 */
export class RunBusyError extends EventsError {
  override readonly name = "RunBusyError";
  readonly code = "HOLDFAST_RUN_BUSY";
  readonly retryable = true;
  constructor(readonly runId: string) {
    super(`run ${JSON.stringify(runId)} must finish a call in flight before this one can start`);
  }
}

/** An approval or denial for a run with no held answer (or none by that gate id). */
export class NothingGatedError extends EventsError {
  override readonly name = "NothingGatedError";
  readonly code = "HOLDFAST_NOTHING_GATED";
  readonly retryable = false;
  constructor(
    readonly runId: string,
    /** The held answer asked for by id, when one was. */
    readonly gateId?: string,
  ) {
    super(
      gateId === undefined
        ? `run ${JSON.stringify(runId)} has no answer held by the tool-call gate`
        : `run ${JSON.stringify(runId)} has no held answer ${JSON.stringify(gateId)}`,
    );
  }
}

/**
 * A resume of a run whose answer the tool-call gate holds: an operator approves or denies
 * that answer instead (a resume would leave the agent waiting on it).
 */
export class RunGatedError extends EventsError {
  override readonly name = "RunGatedError";
  readonly code = "HOLDFAST_RUN_GATED";
  readonly retryable = false;
  constructor(readonly runId: string) {
    super(
      `run ${JSON.stringify(runId)} has an answer held by the tool-call gate: approve or deny it (holdfast approve|deny)`,
    );
  }
}

/**
 * A durable-run command the run as it stands refuses: `fenced`, a write under a lease that
 * is over (the worker lost the run); `not_queued`, `held`, a lease the run cannot take now;
 * `not_ended`, `finished`, a re-drive of a run that is not failed; `not_durable`, a run that
 * was never submitted as a durable run; `idempotency_key_reused`, a submission whose key
 * names a run submitted with another input or partition key.
 */
export class DurableRunError extends EventsError {
  override readonly name = "DurableRunError";
  readonly code = "HOLDFAST_DURABLE_RUN";
  readonly retryable = false;
  constructor(
    readonly reason:
      | "fenced"
      | "not_queued"
      | "held"
      | "not_ended"
      | "finished"
      | "not_durable"
      | "idempotency_key_reused",
    message: string,
  ) {
    super(message);
  }
}
