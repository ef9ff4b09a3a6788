/**
 * Raised by a step that must not be tried again (an unknown document kind, a card
 * declined): the step fails at once and so does the run, whatever its retries allow.
 */
export class NonRetriable extends Error {
  override readonly name = "NonRetriable";
}

/** A step gave up: its last attempt's error is the cause. The run fails with it. */
export class StepFailedError extends Error {
  override readonly name = "StepFailedError";
  constructor(
    readonly label: string,
    readonly ordinal: number,
    readonly attempts: number,
    cause: unknown,
  ) {
    super(
      `step ${label}#${ordinal} failed after ${attempts} attempt${attempts === 1 ? "" : "s"}: ${(cause as Error)?.message ?? String(cause)}`,
      { cause },
    );
  }
}

/**
 * The run is no longer this worker's (held, cancelled, past its ceiling, its lease lost):
 * whatever the code does from here is not recorded. Raised by `run.step` and seen on
 * `run.signal`.
 */
export class RunRevokedError extends Error {
  override readonly name = "RunRevokedError";
  constructor(
    readonly runId: string,
    readonly reason: string,
  ) {
    super(`run ${runId} is no longer this worker's (${reason})`);
  }
}

/** A step's result cannot be recorded: it is not a JSON value, or too large to be part of an event. */
export class UnrecordableResultError extends NonRetriable {
  constructor(label: string, cause: unknown) {
    super(
      `step ${label} returned a value that cannot be recorded (${(cause as Error)?.message ?? cause}): return plain JSON data`,
    );
  }
}
