import {
  createInbox,
  errors,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  type Subscription,
} from "@nats-io/transport-node";

/** JetStream's answer to a publish: where the message landed, or why it did not. */
export type PubAck =
  | { readonly ok: true; readonly seq: number; readonly duplicate: boolean }
  | { readonly ok: false; readonly errCode: number; readonly description: string }
  /** Nobody answered: no stream took the subject (503 no responders), or the ack timed out. */
  | { readonly ok: false; readonly errCode: 0; readonly description: string }
  /** The server refused the publish: this connection's credential may not publish to the subject. */
  | { readonly ok: false; readonly errCode: typeof PERMISSION_DENIED; readonly description: string }
  /** The message is larger than the server takes (its max_payload): it was never sent. */
  | { readonly ok: false; readonly errCode: typeof TOO_LARGE; readonly description: string };

/** The errCode of a publish this connection's credential was not allowed (not JetStream's own codes). */
export const PERMISSION_DENIED = -1;
/** The errCode of a publish larger than the server's max_payload, refused before it was sent. */
export const TOO_LARGE = -2;

interface Pending {
  readonly resolve: (ack: PubAck) => void;
  readonly deadline: number;
  readonly subject: string;
}

/** A publish not sent yet: deferred, or waiting for the end of this round of I/O. */
interface Deferred {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers: MsgHdrs | undefined;
  readonly token: string;
}

/**
 * Publishes to JetStream with many publishes in flight and their acknowledgements
 * matched as they come back, on one subscription and one timer for all of them: no
 * promise, timer or Error per publish (the nats.js request path builds all three), so an
 * ack costs a JSON parse and a map lookup.
 *
 * Publishes made while the event loop handles one round of I/O go out together, in one
 * socket write, once that round is done (setImmediate): nats.js writes what was published
 * within one microtask checkpoint, and each connection's request is handled in a callback
 * of its own, so calls arriving together on many connections each cost a write of their
 * own otherwise. The round's other callbacks are all a publish waits for.
 *
 * A publish that nobody waits on urgently (a call's outcome, once the client has its
 * answer) can be deferred: it goes out with the next urgent publish, in the same write, or
 * after `deferMs`. On a loopback socket a write costs the writer the whole TCP path, so
 * one agent after another on one gateway pays one write per call instead of two.
 */
export class AsyncPublisher {
  private readonly prefix: string;
  private readonly pending = new Map<string, Pending>();
  private readonly subscription: Subscription;
  private readonly sweeper: NodeJS.Timeout;
  private next = 0;
  private deferred: Deferred[] = [];
  private deferTimer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly ackTimeoutMs: number,
    private readonly deferMs = 2,
    /** The connection's inbox prefix: acks come where this process's credential may read. */
    inboxPrefix?: string,
  ) {
    this.prefix = createInbox(inboxPrefix);
    this.subscription = nc.subscribe(`${this.prefix}.*`, {
      callback: (error, msg) => {
        if (error === null) this.settle(msg);
      },
    });
    // Acks are overdue only by whole sweeps: a publish times out between one and two
    // sweep intervals after its deadline would have fired.
    const sweepMs = Math.max(50, Math.min(1_000, Math.floor(ackTimeoutMs / 4)));
    this.sweeper = setInterval(() => this.sweep(), sweepMs);
    this.sweeper.unref();
  }

  /** Publishes and resolves with JetStream's ack (never rejects: failures are PubAcks). */
  publish(subject: string, data: Uint8Array, headers?: MsgHdrs): Promise<PubAck> {
    // Behind the deferred ones, in order: they all go out in this round's write.
    return this.queue(subject, data, headers, () => {
      this.immediate ??= setImmediate(this.flushRound);
    });
  }

  /** Like publish, but the message may wait up to `deferMs` to share a write with others. */
  publishDeferred(subject: string, data: Uint8Array, headers?: MsgHdrs): Promise<PubAck> {
    return this.queue(subject, data, headers, () => {
      this.deferTimer ??= setTimeout(() => this.flush(), this.deferMs);
    });
  }

  private queue(
    subject: string,
    data: Uint8Array,
    headers: MsgHdrs | undefined,
    schedule: () => void,
  ): Promise<PubAck> {
    const token = (this.next++).toString(36);
    return new Promise<PubAck>((resolve) => {
      this.pending.set(token, { resolve, deadline: Date.now() + this.ackTimeoutMs, subject });
      this.deferred.push({ subject, data, headers, token });
      schedule();
    });
  }

  private readonly flushRound = (): void => {
    this.immediate = undefined;
    this.flush();
  };

  /** Sends every publish not sent yet (deferred, or waiting for this round's end) now. */
  flush(): void {
    if (this.deferTimer !== undefined) {
      clearTimeout(this.deferTimer);
      this.deferTimer = undefined;
    }
    if (this.deferred.length === 0) return;
    const deferred = this.deferred;
    this.deferred = [];
    for (const d of deferred) this.send(d.subject, d.data, d.headers, d.token);
  }

  private send(subject: string, data: Uint8Array, headers: MsgHdrs | undefined, token: string): void {
    try {
      this.nc.publish(subject, data, { reply: `${this.prefix}.${token}`, headers });
    } catch (error) {
      const pending = this.pending.get(token);
      this.pending.delete(token);
      // Too large for the server is for good: sent again it is as large. Anything else (the
      // connection closing) may pass.
      const tooLarge = error instanceof errors.InvalidArgumentError && /max_payload/.test(error.message);
      pending?.resolve({
        ok: false,
        errCode: tooLarge ? TOO_LARGE : 0,
        description: tooLarge
          ? `the message (${data.length} bytes and its headers) is larger than the server's max_payload (${this.nc.info?.max_payload ?? "unknown"} bytes)`
          : (error as Error).message,
      });
    }
  }

  /**
   * The server refused a publish to `subject` (its permissions violation names the
   * subject): every publish to it still waiting fails now, instead of when its ack would
   * have timed out, and says why.
   */
  refused(subject: string, why: string): void {
    for (const [token, pending] of this.pending) {
      if (pending.subject !== subject) continue;
      this.pending.delete(token);
      pending.resolve({
        ok: false,
        errCode: PERMISSION_DENIED,
        description: `this process's NATS credential may not publish to ${subject} (${why})`,
      });
    }
  }

  /** Answers every publish still waiting as failed, and stops. */
  close(): void {
    clearInterval(this.sweeper);
    clearTimeout(this.deferTimer);
    if (this.immediate !== undefined) clearImmediate(this.immediate);
    this.immediate = undefined;
    this.deferred = [];
    this.subscription.unsubscribe();
    for (const [token, pending] of this.pending) {
      this.pending.delete(token);
      pending.resolve({
        ok: false,
        errCode: 0,
        description: "the connection closed before JetStream answered",
      });
    }
  }

  get inFlight(): number {
    return this.pending.size;
  }

  private settle(msg: Msg): void {
    const token = msg.subject.slice(this.prefix.length + 1);
    const pending = this.pending.get(token);
    if (pending === undefined) return;
    this.pending.delete(token);
    if (msg.headers?.hasError) {
      pending.resolve({
        ok: false,
        errCode: 0,
        description: `${msg.headers.code} ${msg.headers.description}`,
      });
      return;
    }
    pending.resolve(readAck(msg.data));
  }

  private sweep(): void {
    const now = Date.now();
    for (const [token, pending] of this.pending) {
      if (pending.deadline > now) continue;
      this.pending.delete(token);
      pending.resolve({
        ok: false,
        errCode: 0,
        description: `JetStream did not acknowledge within ${this.ackTimeoutMs} ms`,
      });
    }
  }
}

function readAck(data: Uint8Array): PubAck {
  let body: { seq?: unknown; duplicate?: unknown; error?: { err_code?: unknown; description?: unknown } };
  try {
    body = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("utf8"));
  } catch {
    return { ok: false, errCode: 0, description: "JetStream answered with something that is not an ack" };
  }
  if (body.error !== undefined) {
    return {
      ok: false,
      errCode: typeof body.error.err_code === "number" ? body.error.err_code : 0,
      description: String(body.error.description ?? "unknown JetStream error"),
    };
  }
  if (typeof body.seq !== "number")
    return { ok: false, errCode: 0, description: "JetStream's ack has no sequence" };
  return { ok: true, seq: body.seq, duplicate: body.duplicate === true };
}
