export type NatsdErrorCode =
  | "HOLDFAST_NATSD_NOT_FOUND"
  | "HOLDFAST_NATSD_INSTALL_UNSUPPORTED"
  | "HOLDFAST_NATSD_INSTALL_FAILED"
  | "HOLDFAST_NATSD_START_FAILED"
  | "HOLDFAST_NATSD_START_TIMEOUT"
  | "HOLDFAST_NATSD_STORE_IN_USE"
  | "HOLDFAST_NATSD_DEBIAN_UNSUPPORTED"
  | "HOLDFAST_NATSD_DEBIAN_FAILED";

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

/**
 * Another nats-server holds the store directory, and it is not an orphan this start may
 * stop: two servers on one JetStream store would corrupt it. Retrying will not help while
 * that server runs; `natsPid` and `ownerPid` say which processes to look at.
 */
export class NatsStoreInUseError extends NatsdError {
  override readonly name = "NatsStoreInUseError";
  readonly code = "HOLDFAST_NATSD_STORE_IN_USE";
  readonly retryable = false;
  readonly storeDir: string;
  /** The server holding the store; undefined while its owner is still starting it. */
  readonly natsPid: number | undefined;
  /** The process that started that server. */
  readonly ownerPid: number;

  constructor(
    message: string,
    holder: { storeDir: string; natsPid: number | undefined; ownerPid: number },
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.storeDir = holder.storeDir;
    this.natsPid = holder.natsPid;
    this.ownerPid = holder.ownerPid;
  }
}

/** This machine lacks the tools a private Debian archive needs; `missing` names them. */
export class DebianArchiveUnsupportedError extends NatsdError {
  override readonly name = "DebianArchiveUnsupportedError";
  readonly code = "HOLDFAST_NATSD_DEBIAN_UNSUPPORTED";
  readonly retryable = false;
  readonly missing: readonly string[];

  constructor(message: string, missing: readonly string[], options?: ErrorOptions) {
    super(message, options);
    this.missing = missing;
  }
}

/** apt-get, apt-cache or dpkg failed; usually the mirror was unreachable, so trying again may help. */
export class DebianArchiveError extends NatsdError {
  override readonly name = "DebianArchiveError";
  readonly code = "HOLDFAST_NATSD_DEBIAN_FAILED";
  readonly retryable = true;
}
