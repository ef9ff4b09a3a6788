/** Errors of the event bus. `retryable` says whether the same call can succeed later. */
export abstract class BusError extends Error {
  abstract readonly code: string;
  abstract readonly retryable: boolean;
}

/**
 * Someone else appended to the run since the caller last read it (JetStream API error
 * 10071, wrong last sequence). Re-read the run, decide again, and retry a bounded number
 * of times.
 */
export class ConcurrencyError extends BusError {
  override readonly name = "ConcurrencyError";
  readonly code = "HOLDFAST_CONCURRENCY";
  readonly retryable = true;
  constructor(
    readonly runId: string,
    readonly expectedStreamSequence: number,
    readonly actualStreamSequence: number | undefined,
  ) {
    super(
      `run ${JSON.stringify(runId)} moved on: expected its last event at stream sequence ${expectedStreamSequence}` +
        (actualStreamSequence === undefined ? "" : `, found ${actualStreamSequence}`),
    );
  }
}

/** NATS or JetStream could not be reached or did not answer in time. */
export class BusUnavailableError extends BusError {
  override readonly name = "BusUnavailableError";
  readonly code = "HOLDFAST_BUS_UNAVAILABLE";
  readonly retryable = true;
}

/** The stream or consumer exists with a configuration Holdfast cannot adopt. */
export class BusConfigurationError extends BusError {
  override readonly name = "BusConfigurationError";
  readonly code = "HOLDFAST_BUS_MISCONFIGURED";
  readonly retryable = false;
}

/** JetStream refused an append for a reason a retry will not change (the stream is full, sealed, …). */
export class BusRejectedError extends BusError {
  override readonly name = "BusRejectedError";
  readonly code = "HOLDFAST_BUS_REJECTED";
  readonly retryable = false;
}

/**
 * A key of a bucket was not where a compare-and-set expected it: `create` found a value,
 * `update` or `delete` another revision. Someone else wrote first; read it again.
 */
export class KeyChangedError extends BusError {
  override readonly name = "KeyChangedError";
  readonly code = "HOLDFAST_KEY_CHANGED";
  readonly retryable = false;
}
