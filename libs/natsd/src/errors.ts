export type NatsdErrorCode =
  | "HOLDFAST_NATSD_NOT_FOUND"
  | "HOLDFAST_NATSD_INSTALL_UNSUPPORTED"
  | "HOLDFAST_NATSD_INSTALL_FAILED"
  | "HOLDFAST_NATSD_START_FAILED"
  | "HOLDFAST_NATSD_START_TIMEOUT";

export abstract class NatsdError extends Error {
  abstract readonly code: NatsdErrorCode;
  abstract readonly retryable: boolean;
}

/** No usable nats-server in any searched place; the message lists each place and why it was rejected. */
export class NatsServerNotFoundError extends NatsdError {
  override readonly name = "NatsServerNotFoundError";
  readonly code = "HOLDFAST_NATSD_NOT_FOUND";
  readonly retryable = false;
}

/** This machine has no apt-get/dpkg, so the automatic install cannot work here at all. */
export class NatsServerInstallUnsupportedError extends NatsdError {
  override readonly name = "NatsServerInstallUnsupportedError";
  readonly code = "HOLDFAST_NATSD_INSTALL_UNSUPPORTED";
  readonly retryable = false;
}

/** The download or unpacking failed; a network hiccup is the usual cause, so trying again may help. */
export class NatsServerInstallError extends NatsdError {
  override readonly name = "NatsServerInstallError";
  readonly code = "HOLDFAST_NATSD_INSTALL_FAILED";
  readonly retryable = true;
}

/** The process could not be spawned or exited before it was ready; its output is in the message. */
export class NatsServerStartError extends NatsdError {
  override readonly name = "NatsServerStartError";
  readonly code = "HOLDFAST_NATSD_START_FAILED";
  readonly retryable = false;
}

/** The process kept running but never accepted a connection in time (a slow JetStream recovery, a busy box). */
export class NatsServerStartTimeoutError extends NatsdError {
  override readonly name = "NatsServerStartTimeoutError";
  readonly code = "HOLDFAST_NATSD_START_TIMEOUT";
  readonly retryable = true;
}
