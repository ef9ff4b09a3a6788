export type HarnessErrorCode =
  | "HOLDFAST_HARNESS_NO_NATS_URL"
  | "HOLDFAST_HARNESS_WAIT_TIMEOUT"
  | "HOLDFAST_HARNESS_PYTHON_UNSUPPORTED"
  | "HOLDFAST_HARNESS_PYTHON_INSTALL_FAILED";

export abstract class HarnessError extends Error {
  abstract readonly code: HarnessErrorCode;
  abstract readonly retryable: boolean;
}

/** A test asked for the shared NATS server in a tier whose global setup does not start one. */
export class NatsUrlUnavailableError extends HarnessError {
  override readonly name = "NatsUrlUnavailableError";
  readonly code = "HOLDFAST_HARNESS_NO_NATS_URL";
  readonly retryable = false;
}

/** {@link waitFor} gave up; the message says what was awaited and what the last attempt saw. */
export class WaitForTimeoutError extends HarnessError {
  override readonly name = "WaitForTimeoutError";
  readonly code = "HOLDFAST_HARNESS_WAIT_TIMEOUT";
  readonly retryable = false;
}

/** No fitting Python (3.11+; 3.11 for grpcio) or no apt-get/dpkg here, so httpx or grpcio cannot be provided; tests that need it should skip. */
export class PythonUnavailableError extends HarnessError {
  override readonly name = "PythonUnavailableError";
  readonly code = "HOLDFAST_HARNESS_PYTHON_UNSUPPORTED";
  readonly retryable = false;
}

/** Fetching, unpacking or importing the Debian httpx (or grpcio) packages failed; usually the mirror, so retry. */
export class PythonHttpxInstallError extends HarnessError {
  override readonly name = "PythonHttpxInstallError";
  readonly code = "HOLDFAST_HARNESS_PYTHON_INSTALL_FAILED";
  readonly retryable = true;
}
