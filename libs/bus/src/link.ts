import { decodeStored, type StoredBytes, type StoredEnvelope, type Subjects } from "@holdfast/events";
import { JetStreamApiError, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { inboxPrefix } from "./access.js";
import type { BusOptions } from "./bus.js";
import { BusConfigurationError, type BusError, BusRejectedError, BusUnavailableError } from "./errors.js";
import { AsyncPublisher, PERMISSION_DENIED, type PubAck, TOO_LARGE } from "./publisher.js";
import { QuarantineBook } from "./quarantine.js";

/**
 * One connection to NATS and what every part of the bus shares over it: the JetStream
 * handles, the publisher every write goes through, the quarantine every read goes
 * through. Internal to libs/bus: nothing outside it sees a NATS handle.
 */
export class Link {
  readonly stream: string;
  readonly publisher: AsyncPublisher;
  /** The inbox prefix this connection's replies come to (its principal's own). */
  readonly inbox: string | undefined;
  readonly quarantine: QuarantineBook;

  constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    readonly subjects: Subjects,
    readonly options: BusOptions,
  ) {
    this.stream = subjects.eventsStream;
    this.inbox = options.principal === undefined ? undefined : inboxPrefix(options.principal);
    this.publisher = new AsyncPublisher(
      nc,
      options.appendTimeoutMs ?? 5_000,
      options.deferMs ?? 2,
      this.inbox,
    );
    this.quarantine = new QuarantineBook(options.log);
  }

  /** A stored message as an event, or undefined (quarantined) when it is none a reader can use. */
  readStored(message: StoredBytes): StoredEnvelope | undefined {
    const read = decodeStored(this.subjects, message);
    if (read.quarantined !== undefined) {
      this.quarantine.add(read.quarantined);
      return undefined;
    }
    return read.envelope;
  }

  /** What a service whose credential may not make `what` is told when it is missing. */
  unprovisioned(what: string, cause: unknown): Error {
    if (isPermissionError(cause)) {
      return new BusConfigurationError(
        `${what} does not exist, and this process's NATS credential may not make it: provision it with an admin credential first (holdfast provision; holdfast up does it)`,
        { cause },
      );
    }
    return cause instanceof Error ? cause : new Error(String(cause));
  }
}

export function isApiError(error: unknown, code: number): boolean {
  return error instanceof JetStreamApiError && error.code === code;
}

/** Why a publish failed, as the error a caller can act on: refused for good, or worth a retry. */
export function publishFailed(ack: Extract<PubAck, { ok: false }>, what: string): BusError {
  if (ack.errCode === PERMISSION_DENIED || ack.errCode === TOO_LARGE) {
    return new BusRejectedError(`${what} refused: ${ack.description}`);
  }
  return new BusUnavailableError(`${what} failed: ${ack.description}`);
}

/** NATS refused an operation this connection's credential is not allowed. */
export function isPermissionError(error: unknown): boolean {
  return (
    error instanceof Error && /permission|authoriz/i.test(`${error.message} ${String(error.cause ?? "")}`)
  );
}

export function isNotFound(error: unknown): boolean {
  return error instanceof Error && /message not found|no message found/i.test(error.message);
}
