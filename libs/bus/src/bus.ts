import { setTimeout as sleep } from "node:timers/promises";
import {
  decodeStored,
  type Envelope,
  type EventType,
  encodeEnvelope,
  type QuarantinedEvent,
  type StoredBytes,
  type StoredEnvelope,
  type Subjects,
  subjects as subjectsFor,
} from "@holdfast/events";
import {
  AckPolicy,
  type Consumer,
  type ConsumerConfig,
  type ConsumerMessages,
  DeliverPolicy,
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type StreamConfig,
} from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import {
  type ConnectionOptions,
  connect,
  errors,
  headers,
  type MsgHdrs,
  type NatsConnection,
  nanos,
} from "@nats-io/transport-node";
import { inboxPrefix, type Principal } from "./access.js";
import { BUCKET_NAMES, type BucketName, bucketTtlMs } from "./buckets.js";
import { authenticatorFrom } from "./credentials.js";
import {
  BusConfigurationError,
  BusError,
  BusRejectedError,
  BusUnavailableError,
  ConcurrencyError,
} from "./errors.js";
import { AsyncPublisher, PERMISSION_DENIED, type PubAck, TOO_LARGE } from "./publisher.js";
import { type PulledMessage, Puller } from "./puller.js";
import { QuarantineBook, type QuarantineCounts, type QuarantineLog } from "./quarantine.js";

export interface BusOptions {
  /** One URL or a comma-separated list, e.g. nats://127.0.0.1:4222. */
  servers: string;
  /** Subject and stream prefix: one deployment (or one test) per prefix. */
  prefix: string;
  /** Connection name shown by `nats server report connections`. */
  name: string;
  /**
   * This process's NATS credential (nats.credentials): a file holding an nkey seed, or a
   * `.creds` file. Unset, the connection presents none (a server without authorization).
   */
  credentials?: string | undefined;
  /** Who this process is to NATS: its replies come to this principal's own inbox, which only it may read. */
  principal?: Principal | undefined;
  /** TLS to the server (a tls:// URL, or a server that requires it). */
  tls?: BusTls | undefined;
  /** How long the first connection may take before `connectBus` gives up (default 20 s). */
  connectTimeoutMs?: number | undefined;
  /** JetStream replicas for streams this bus creates (3 in a production cluster). */
  replicas?: number;
  /** How long an append waits for the stream's acknowledgement. */
  appendTimeoutMs?: number;
  /** Longest wait of a deferred append for others to share its socket write (default 2 ms). */
  deferMs?: number;
  /** How long a watch waits between reads of the stream (default 100 ms): how late it may see an event. */
  watchLingerMs?: number;
  /** How long a watch of a quiet stream may wait between reads (default 250 ms). */
  watchIdleMs?: number;
  /** Where each event this process quarantines is told, once (the service's logger). */
  log?: QuarantineLog;
}

/** TLS for the connection to NATS (nats.tls). */
export interface BusTls {
  /** CA certificate(s) the server's certificate must chain to; unset, the system's. */
  caFile?: string | undefined;
  /** A client certificate and its key, for a server that verifies clients (mutual TLS). */
  certFile?: string | undefined;
  keyFile?: string | undefined;
}

export interface AppendResult {
  streamSequence: number;
  /** The event was already in the log (a retried append); nothing was written twice. */
  duplicate: boolean;
}

export interface StoredEvent {
  /** The event, or an UnknownEvent when this version cannot read its type or version. */
  envelope: StoredEnvelope;
  streamSequence: number;
}

/**
 * An event as the watch delivers it: its run, type and place, its bytes not yet decoded
 * (Bus.decode reads them, quarantining what cannot be used).
 */
export interface WatchedEvent {
  runId: string;
  /** The event type, from the subject (a type this version may not know). */
  type: string;
  streamSequence: number;
  subject: string;
  data: Uint8Array;
}

/** A live view of every event appended from now on. */
export interface Watch {
  stop(): Promise<void>;
}

/** The event stream's size and age. */
export interface StreamState {
  firstSeq: number;
  lastSeq: number;
  messages: number;
  /** When the stream was created (RFC 3339): its identity across re-creations. */
  created: string;
}

/** A stored message in full, for tools and tests that audit the log. */
export interface StoredMessage {
  seq: number;
  subject: string;
  data: Uint8Array;
  /** Every header, as NATS writes them. */
  headers: string;
}

/** A message of the event stream as stored, not yet decoded. */
export interface RawMessage {
  seq: number;
  subject: string;
  data: Uint8Array;
  /** When the stream stored it (epoch ms). */
  storedMs: number;
}

export interface RunHistory {
  runId: string;
  /** The events a reader can fold (this version's, and those it counts as unknown), in order. */
  events: StoredEvent[];
  /** The run's messages that are no event a reader can use, in order: set aside, not folded. */
  quarantined: QuarantinedEvent[];
  /** Stream sequence of the run's last message (a quarantined one too); 0 for a run with none. */
  lastStreamSequence: number;
}

export interface DurableSpec {
  name: string;
  filterSubject: string;
  /** Redelivery delay for unacknowledged messages. */
  ackWaitMs: number;
  /** Upper bound of unacknowledged messages in flight. */
  maxAckPending: number;
  ackPolicy?: "explicit" | "all";
}

// JetStream API error: a stream with that name exists (with another configuration).
const STREAM_NAME_IN_USE = 10058;
const DUPLICATE_WINDOW_MS = 2 * 60_000;
const READ_BATCH = 512;
/** How often a read retries a replica that has not caught up with what another one named. */
const READ_CATCH_UP_ATTEMPTS = 20;

/** Connects to NATS. The connection reconnects forever; callers see errors per operation. */
export async function connectBus(options: BusOptions): Promise<Bus> {
  const connection: ConnectionOptions = {
    servers: options.servers.split(",").map((s) => s.trim()),
    name: options.name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    ...(options.connectTimeoutMs === undefined ? {} : { timeout: options.connectTimeoutMs }),
    // Async stack traces cost an Error (and its stack) per request: a measurable share of
    // the gateway's hot path, for context that our typed errors already carry.
    noAsyncTraces: true,
  };
  if (options.credentials !== undefined) {
    connection.authenticator = await authenticatorFrom(options.credentials);
  }
  if (options.principal !== undefined) connection.inboxPrefix = inboxPrefix(options.principal);
  if (options.tls !== undefined) {
    const { caFile, certFile, keyFile } = options.tls;
    connection.tls = {
      ...(caFile === undefined ? {} : { caFile }),
      ...(certFile === undefined ? {} : { certFile }),
      ...(keyFile === undefined ? {} : { keyFile }),
    };
  }
  let nc: NatsConnection;
  try {
    nc = await connect(connection);
  } catch (cause) {
    if (/authori[sz]ation|authentication/i.test((cause as Error).message)) {
      throw new BusConfigurationError(
        `NATS at ${options.servers} refused ${options.credentials === undefined ? "a connection without a credential (set nats.credentials)" : `the credential in ${options.credentials}`}: ${(cause as Error).message}`,
        { cause },
      );
    }
    throw new BusUnavailableError(`cannot connect to NATS at ${options.servers}`, { cause });
  }
  const jsm = await jetstreamManager(nc);
  return new Bus(nc, jetstream(nc), jsm, subjectsFor(options.prefix), options);
}

/**
 * Holdfast's only door to NATS: appends with per-run order, reads, the live watch, KV
 * buckets, durable consumers. No other package touches a NATS connection.
 */
export class Bus {
  readonly subjects: Subjects;
  private readonly publisher: AsyncPublisher;
  /** The inbox prefix this connection's replies come to (its principal's own). */
  private readonly inbox: string | undefined;
  private readonly quarantine: QuarantineBook;

  constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    subjects: Subjects,
    private readonly options: BusOptions,
  ) {
    this.subjects = subjects;
    this.inbox = options.principal === undefined ? undefined : inboxPrefix(options.principal);
    this.publisher = new AsyncPublisher(
      nc,
      options.appendTimeoutMs ?? 5_000,
      options.deferMs ?? 2,
      this.inbox,
    );
    this.quarantine = new QuarantineBook(options.log);
    void this.followStatus();
  }

  /**
   * Reads a message of the log as an event: the event, or undefined when it is none a
   * reader can use (not an envelope, a type its payload or subject disagrees with, an
   * integer out of range), which is quarantined: counted and told once, and passed over.
   * Every read of this bus goes through here; a watch's handler calls it itself.
   */
  decode(event: WatchedEvent): StoredEnvelope | undefined {
    return this.readStored({ seq: event.streamSequence, subject: event.subject, data: event.data });
  }

  /**
   * Sets aside an event a reader found it cannot use after decoding it (a run's event that
   * is not its next): counted and told once, like those the bus quarantines itself.
   */
  quarantined(event: QuarantinedEvent): void {
    this.quarantine.add(event);
  }

  /** The events this process has set aside since it started, in all and by reason. */
  get quarantineCounts(): QuarantineCounts {
    return this.quarantine.counts;
  }

  private readStored(message: StoredBytes): StoredEnvelope | undefined {
    const read = decodeStored(this.subjects, message);
    if (read.quarantined !== undefined) {
      this.quarantine.add(read.quarantined);
      return undefined;
    }
    return read.envelope;
  }

  private reconnecting = false;

  /** False while the connection to NATS is down (appends would wait, then fail). */
  get connected(): boolean {
    return !this.nc.isClosed() && !this.reconnecting;
  }

  private async followStatus(): Promise<void> {
    for await (const s of this.nc.status()) {
      if (s.type === "disconnect" || s.type === "reconnecting") this.reconnecting = true;
      else if (s.type === "reconnect") this.reconnecting = false;
      else if (s.type === "error" && s.error instanceof errors.PermissionViolationError) {
        if (s.error.operation === "publish") this.publisher.refused(s.error.subject, s.error.message);
      }
    }
  }

  get eventsStream(): string {
    return this.subjects.eventsStream;
  }

  /**
   * Creates the event stream, or brings an existing one to the configuration this version
   * wants. Safe to call from every service at every start: a stream as wanted is only
   * looked at, and only a credential allowed to (an admin's) can make or change it.
   */
  async provision(): Promise<void> {
    const want: Partial<StreamConfig> & { name: string } = {
      name: this.eventsStream,
      description: "Holdfast run events: the log every projection is derived from",
      subjects: [this.subjects.allRuns, this.subjects.allKeys, this.subjects.allAgents],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.Old,
      num_replicas: this.options.replicas ?? 1,
      max_age: 0,
      duplicate_window: nanos(DUPLICATE_WINDOW_MS),
      allow_direct: true,
      // The log is append-only: no message is deleted or purged by a client.
      deny_delete: true,
      deny_purge: true,
      // Each run event, once stored, is also published on a subject of its own: a process
      // serving a run another process writes too hears that run's events at once (`tail`)
      // without a consumer, and without hearing every other run's.
      republish: { src: this.subjects.allRuns, dest: this.subjects.republishedRuns },
    };
    const existing = await this.jsm.streams.info(this.eventsStream).catch((error: unknown) => {
      if (isApiError(error, JetStreamApiCodes.StreamNotFound)) return undefined;
      throw error;
    });
    if (existing === undefined) {
      try {
        await this.jsm.streams.add(want);
        return;
      } catch (error) {
        // Another service created it between our look and our add: fall through to update.
        if (!isApiError(error, STREAM_NAME_IN_USE))
          throw this.unprovisioned(`the stream ${this.eventsStream}`, error);
      }
    }
    const current = existing?.config ?? (await this.jsm.streams.info(this.eventsStream)).config;
    if (current.storage !== want.storage) {
      throw new BusConfigurationError(
        `stream ${this.eventsStream} uses ${current.storage} storage; Holdfast needs file storage`,
      );
    }
    const drift =
      current.num_replicas !== want.num_replicas ||
      current.allow_direct !== true ||
      current.deny_delete !== true ||
      current.deny_purge !== true ||
      current.republish?.src !== want.republish?.src ||
      current.republish?.dest !== want.republish?.dest ||
      !current.subjects?.includes(this.subjects.allRuns) ||
      !current.subjects?.includes(this.subjects.allKeys) ||
      !current.subjects?.includes(this.subjects.allAgents);
    if (drift) {
      await this.updateStream({
        ...current,
        subjects: [
          ...new Set([
            ...(current.subjects ?? []),
            this.subjects.allRuns,
            this.subjects.allKeys,
            this.subjects.allAgents,
          ]),
        ],
        num_replicas: want.num_replicas,
        allow_direct: true,
        deny_delete: true,
        deny_purge: true,
        republish: want.republish,
      });
    }
  }

  private async updateStream(config: Parameters<JetStreamManager["streams"]["update"]>[1]): Promise<void> {
    try {
      await this.jsm.streams.update(this.eventsStream, config);
    } catch (error) {
      throw this.unprovisioned(`the stream ${this.eventsStream} as this version wants it`, error);
    }
  }

  /**
   * Appends one event to its run, only if the run's last event is still at
   * `expectedLastStreamSequence` (0: the run has no events yet). The event id is the
   * JetStream message id, so a retried append never writes the event twice.
   *
   * Throws ConcurrencyError when another writer got there first.
   *
   * `defer`: nobody is waiting on this append urgently; it may wait a few milliseconds
   * to share a socket write with the next append (see `flushDeferred`).
   */
  async append(
    envelope: Envelope,
    expectedLastStreamSequence: number,
    options: { defer?: boolean } = {},
  ): Promise<AppendResult> {
    const type = envelope.type as EventType;
    const subject = this.subjects.runEvent(envelope.runId, type);
    const h = eventHeaders(envelope);
    h.set("Nats-Expected-Last-Subject-Sequence", String(expectedLastStreamSequence));
    h.set("Nats-Expected-Last-Subject-Sequence-Subject", this.subjects.run(envelope.runId));
    const data = encodeEnvelope(envelope);
    const ack = await (options.defer
      ? this.publisher.publishDeferred(subject, data, h)
      : this.publisher.publish(subject, data, h));
    if (ack.ok) return { streamSequence: ack.seq, duplicate: ack.duplicate };
    if (WRONG_LAST_SEQUENCE.has(ack.errCode)) {
      // A retry of an append that already landed fails the sequence check before the
      // dedupe check: recognise our own event and report it as a duplicate.
      const landed = await this.findLanded(subject, envelope.id);
      if (landed !== undefined) return { streamSequence: landed, duplicate: true };
      throw new ConcurrencyError(
        envelope.runId,
        expectedLastStreamSequence,
        wrongLastSequence(ack.description),
      );
    }
    if (
      ack.errCode === PERMISSION_DENIED ||
      ack.errCode === TOO_LARGE ||
      ack.errCode === 0 ||
      SETTLES_LATER.has(ack.errCode)
    ) {
      throw publishFailed(ack, `append to ${this.eventsStream}`);
    }
    throw new BusRejectedError(`JetStream refused the append (${ack.errCode}): ${ack.description}`);
  }

  /**
   * Appends one event about a provider key (no run, no expected sequence: each is a
   * reading that stands alone) on the key's own subject; its id dedupes a retried publish.
   */
  async appendKeyEvent(keyId: string, envelope: Envelope): Promise<void> {
    const h = eventHeaders(envelope);
    const ack = await this.publisher.publishDeferred(
      this.subjects.keyEvent(keyId, envelope.type as EventType),
      encodeEnvelope(envelope),
      h,
    );
    if (!ack.ok) throw publishFailed(ack, `append to ${this.eventsStream}`);
  }

  /**
   * Appends one event about an agent (its deployment: no run, no expected sequence) on the
   * agent's own subject, and waits for the log to take it; its id dedupes a retried publish.
   */
  async appendAgentEvent(agent: string, envelope: Envelope): Promise<number> {
    const h = eventHeaders(envelope);
    const ack = await this.publisher.publish(
      this.subjects.agentEvent(agent, envelope.type as EventType),
      encodeEnvelope(envelope),
      h,
    );
    if (!ack.ok) throw publishFailed(ack, `append to ${this.eventsStream}`);
    return ack.seq;
  }

  private async findLanded(subject: string, eventId: string): Promise<number | undefined> {
    const last = await this.jsm.direct
      .getMessage(this.eventsStream, { last_by_subj: subject })
      .catch(() => null);
    if (last && last.header.get("Nats-Msg-Id") === eventId) return last.seq;
    return undefined;
  }

  /**
   * Sends deferred appends, and those waiting for the end of this round of I/O, now: a
   * caller about to wait on one of them should not wait the deferral out.
   */
  flushDeferred(): void {
    this.publisher.flush();
  }

  /**
   * The events of one run in order, read directly from the stream (no consumer needed):
   * all of them, or those after stream sequence `after` (what a reader that knows the run
   * up to there is missing).
   */
  async readRun(runId: string, after = 0): Promise<RunHistory> {
    try {
      return await this.readRunFrom(runId, after);
    } catch (error) {
      if (error instanceof BusError) throw error;
      // NATS's own failures (a request timing out while a cluster fails over, the
      // connection closing) are the log being unavailable: a caller may try again.
      throw new BusUnavailableError(
        `reading run ${JSON.stringify(runId)} failed: ${(error as Error).message}`,
        {
          cause: error,
        },
      );
    }
  }

  private async readRunFrom(runId: string, after: number): Promise<RunHistory> {
    // Not one read over the run's wildcard: for a wildcard, nats-server walks every message
    // of each block from the run's first event on, tokenizing each subject (about 8 ms of
    // server CPU per read on a stream of 70k events, which saturated it at 100 reads/s).
    // Each subject's last sequence comes from the server's subject index, and each subject
    // with something new is read by its literal name, which jumps to its own messages.
    const lasts = new Map<string, number>();
    try {
      const latest = await this.jsm.direct.getLastMessagesFor(this.eventsStream, {
        multi_last: [this.subjects.run(runId)],
      });
      for await (const message of latest) lasts.set(message.subject, message.seq);
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
    const parts = await Promise.all(
      [...lasts]
        .filter(([, last]) => last > after)
        .map(([subject, last]) => this.readSubject(subject, after, last)),
    );
    // Each subject read up to its last sequence as the index had it: what was appended
    // meanwhile is left out whole, so the history has no gap.
    const events: StoredEvent[] = [];
    const quarantined: QuarantinedEvent[] = [];
    let lastStreamSequence = after;
    for (const message of parts.flat().sort((a, b) => a.seq - b.seq)) {
      lastStreamSequence = message.seq;
      const read = decodeStored(this.subjects, message);
      if (read.quarantined === undefined) {
        events.push({ envelope: read.envelope, streamSequence: message.seq });
      } else {
        this.quarantine.add(read.quarantined);
        quarantined.push(read.quarantined);
      }
    }
    return { runId, events, quarantined, lastStreamSequence };
  }

  /**
   * The events of one literal subject after stream sequence `after`, through `last`. A
   * direct get may be answered by a replica that is behind the one that named `last`:
   * the read goes on until it reaches `last`, so the run's history has no hole.
   */
  private async readSubject(subject: string, after: number, last: number): Promise<StoredBytes[]> {
    const messages: StoredBytes[] = [];
    let from = after + 1;
    for (let attempt = 0; from <= last; attempt++) {
      if (attempt > 0) {
        if (attempt > READ_CATCH_UP_ATTEMPTS) {
          throw new BusUnavailableError(`${subject}: no server had the stream through ${last} yet`);
        }
        await sleep(10 * attempt);
      }
      for (;;) {
        let received = 0;
        try {
          const batch = await this.jsm.direct.getBatch(this.eventsStream, {
            seq: from,
            next_by_subj: subject,
            batch: READ_BATCH,
          });
          for await (const message of batch) {
            received += 1;
            if (message.seq > last) break;
            from = message.seq + 1;
            messages.push({ seq: message.seq, subject: message.subject, data: message.data });
          }
        } catch (error) {
          if (!isNotFound(error)) throw error;
        }
        if (received < READ_BATCH || from > last) break;
      }
    }
    return messages;
  }

  /**
   * Every event appended from now on (or after stream sequence `afterSeq`), in stream
   * order, to `handler` (synchronously; it must not throw).
   *
   * The watch takes what the stream holds in batches: everything after the last event it
   * handed on, in one pull answered at once (`no_wait`) from a consumer of its own, then
   * again `lingerMs` later (at once while batches come back full). A consumer that pushed
   * each event as it was stored would cost every watching process a wake-up per event,
   * and on a VM a wake-up costs more than the event's handling; taken this way, a busy log
   * reaches each watcher in a few reads a second whatever its rate, and an event is seen
   * at most `lingerMs` after it is stored (`idleMs` when it is the first after a quiet
   * while). A consumer that is lost (its server gone, or
   * removed after the process stalled) is made again from the last event handed on:
   * nothing is missed, nothing handed on twice.
   */
  async watch(
    handler: (event: WatchedEvent) => void,
    options: { afterSeq?: number; keys?: boolean; lingerMs?: number; idleMs?: number } = {},
  ): Promise<Watch> {
    // Runs' events, or (keys) the provider keys' own events, whose run id is "".
    const keys = options.keys === true;
    const filter = keys ? this.subjects.allKeys : this.subjects.allRuns;
    const lingerMs = options.lingerMs ?? this.options.watchLingerMs ?? DEFAULT_WATCH_LINGER_MS;
    const idleMs = options.idleMs ?? this.options.watchIdleMs ?? DEFAULT_WATCH_IDLE_MS;
    let waitMs = lingerMs;
    let after = options.afterSeq ?? (await this.streamState()).lastSeq;
    let stopped = false;
    let wake: (() => void) | undefined;
    const pause = (ms: number) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          wake = undefined;
          resolve();
        }, ms);
        wake = () => {
          clearTimeout(timer);
          wake = undefined;
          resolve();
        };
      });
    const open = async (): Promise<{ name: string; puller: Puller }> => {
      const created = await this.jsm.consumers.add(this.eventsStream, {
        filter_subject: filter,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: after + 1,
        ack_policy: AckPolicy.None,
        mem_storage: true,
        num_replicas: 1,
        // Removed by the server once nobody pulls from it (the process died or stalled).
        inactive_threshold: nanos(WATCH_INACTIVE_MS),
      });
      return { name: created.name, puller: this.puller(created.name) };
    };
    let current = await open();
    const loop = (async () => {
      for (let failures = 0; !stopped; ) {
        let messages: PulledMessage[];
        try {
          if (failures > 0) current = await open();
          messages = await current.puller.pull(READ_BATCH);
          failures = 0;
        } catch {
          current.puller.close();
          failures += 1;
          await pause(Math.min(lingerMs * 2 ** failures, WATCH_RETRY_MAX_MS));
          continue;
        }
        for (const message of messages) {
          if (stopped) return;
          if (message.seq <= after) continue;
          after = message.seq;
          const subject = message.subject;
          handler({
            runId: keys ? "" : this.subjects.runIdOf(subject),
            type: subject.slice(subject.lastIndexOf(".") + 1),
            streamSequence: message.seq,
            subject,
            data: message.data,
          });
        }
        // A quiet log is looked at less and less often (each look wakes this process and
        // nats-server), up to `idleMs`; the first event brings the pace back.
        if (messages.length > 0) waitMs = lingerMs;
        else waitMs = Math.min(waitMs * 2, Math.max(lingerMs, idleMs));
        if (messages.length < READ_BATCH && !stopped) await pause(waitMs);
      }
    })();
    return {
      stop: async () => {
        stopped = true;
        wake?.();
        await loop;
        current.puller.close();
        await this.jsm.consumers.delete(this.eventsStream, current.name).catch(() => undefined);
      },
    };
  }

  /**
   * Each event of the given types appended from now on (or after stream sequence
   * `afterSeq`), pushed to `handler` the moment it is stored: for the few events a process
   * must act on at once (an operator's hold, a gate's approval), alongside a `watch` of
   * everything. An ordered consumer: it follows the stream across reconnects; one lost
   * with its server (a cluster's stream leader killed), which the client library would
   * wait on until that server returns, is made again after two heartbeats of silence, from
   * the last event handed on. What it misses meanwhile is late, not lost: the new consumer
   * starts after the last event handed on.
   */
  async follow(
    types: readonly EventType[],
    handler: (event: WatchedEvent) => void,
    options: { afterSeq?: number; keys?: boolean; agents?: boolean } = {},
  ): Promise<Watch> {
    // Runs' events, or (keys, agents) the provider keys' or agents' own events, whose run id is "".
    const keys = options.keys === true || options.agents === true;
    const filters = types.map((type) =>
      options.keys === true
        ? this.subjects.ofKeyType(type)
        : options.agents === true
          ? this.subjects.ofAgentType(type)
          : this.subjects.ofType(type),
    );
    let after = options.afterSeq ?? (await this.streamState()).lastSeq;
    let stopped = false;
    let generation = 0;
    let aliveMs = Date.now();
    const open = async (): Promise<ConsumerMessages> => {
      const mine = ++generation;
      const consumer = await this.js.consumers.get(this.eventsStream, {
        filter_subjects: filters,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: after + 1,
      });
      const messages = await consumer.consume({
        max_messages: FOLLOW_BUFFER,
        expires: FOLLOW_EXPIRES_MS,
        callback: (message) => {
          if (mine !== generation || message.seq <= after) return;
          aliveMs = Date.now();
          after = message.seq;
          const subject = message.subject;
          handler({
            runId: keys ? "" : this.subjects.runIdOf(subject),
            type: subject.slice(subject.lastIndexOf(".") + 1),
            streamSequence: message.seq,
            subject,
            data: message.data,
          });
        },
      });
      // Heartbeats and expired pulls are signs of life too ("next" is only our own pull).
      void (async () => {
        for await (const status of messages.status()) {
          if (mine === generation && status.type !== "next") aliveMs = Date.now();
        }
      })().catch(() => undefined);
      return messages;
    };
    let current = await open();
    aliveMs = Date.now();
    let reopening = false;
    const reopen = async () => {
      void current.close().catch(() => undefined);
      for (let delay = 250; !stopped; delay = Math.min(delay * 2, FOLLOW_EXPIRES_MS)) {
        try {
          current = await open();
          aliveMs = Date.now();
          // Stopped while it was being opened: stop() closed the one before.
          if (stopped) await current.close();
          return;
        } catch {
          await sleep(delay);
        }
      }
    };
    const watchdog = setInterval(() => {
      if (stopped || reopening || Date.now() - aliveMs < FOLLOW_SILENCE_MS) return;
      reopening = true;
      void reopen().finally(() => {
        reopening = false;
      });
    }, FOLLOW_EXPIRES_MS / 4);
    watchdog.unref();
    return {
      stop: async () => {
        stopped = true;
        clearInterval(watchdog);
        await current.close();
      },
    };
  }

  /**
   * Each event of one run from now on, the moment it is stored, to `handler` (the stream
   * republishes stored events; no consumer is made). Until the returned function is
   * called. Core NATS: an event missed across a reconnect is not sent again, so a holder
   * of the run's state checks each event follows the last it knew.
   */
  tail(runId: string, handler: (event: WatchedEvent) => void): () => void {
    // What the stream republished of this run, and nothing else: a credential of the same
    // account can have JetStream answer a direct get (of its own bucket, of another run) on
    // this subject, and that answer names the stream and subject it came from.
    const ofRun = this.subjects.run(runId).slice(0, -1);
    const subscription = this.nc.subscribe(this.subjects.republishedRun(runId), {
      callback: (error, msg) => {
        if (error !== null) return;
        // The stream adds these headers to those its publisher gave: a message carrying its
        // own Nats-Subject or Nats-Sequence (a forger's, naming another type) has two of one.
        const only = (name: string) => {
          const values = msg.headers?.values(name) ?? [];
          return values.length === 1 ? values[0]! : undefined;
        };
        if (only("Nats-Stream") !== this.eventsStream) return;
        const subject = only("Nats-Subject") ?? "";
        const sequence = Number(only("Nats-Sequence") || Number.NaN);
        if (!subject.startsWith(ofRun) || subject.indexOf(".", ofRun.length) !== -1) return;
        if (!Number.isSafeInteger(sequence)) return;
        // The subject it came on is the server's, made from the stored one: the same type.
        if (msg.subject.slice(msg.subject.lastIndexOf(".")) !== subject.slice(subject.lastIndexOf(".")))
          return;
        handler({
          runId,
          type: subject.slice(subject.lastIndexOf(".") + 1),
          streamSequence: sequence,
          subject,
          data: msg.data,
        });
      },
    });
    return () => subscription.unsubscribe();
  }

  /**
   * Every event from `startTimeMs` through stream sequence `toSeq`, in order, read directly
   * from the stream a batch at a time (no consumer): for state rebuilt from a period of the
   * log at start, before a watch takes over after `toSeq`. What is no event a reader can
   * use is quarantined and passed over. Resolves with the number of events handed on.
   */
  async readSince(
    startTimeMs: number,
    toSeq: number,
    handler: (event: StoredEvent) => void,
  ): Promise<number> {
    let read = 0;
    let from: { start_time: string } | { seq: number } = { start_time: new Date(startTimeMs).toISOString() };
    for (;;) {
      let received = 0;
      let last = 0;
      try {
        const batch = await this.jsm.direct.getBatch(this.eventsStream, {
          ...from,
          next_by_subj: this.subjects.allRuns,
          batch: READ_BATCH,
        } as Parameters<JetStreamManager["direct"]["getBatch"]>[1]);
        for await (const message of batch) {
          received += 1;
          last = message.seq;
          if (message.seq > toSeq) break;
          const envelope = this.readStored(message);
          if (envelope === undefined) continue;
          handler({ envelope, streamSequence: message.seq });
          read += 1;
        }
      } catch (error) {
        if (!isNotFound(error)) throw error;
      }
      if (received < READ_BATCH || last >= toSeq) return read;
      from = { seq: last + 1 };
    }
  }

  /** The event stream's configuration as JetStream holds it. */
  async streamConfig(): Promise<StreamConfig> {
    return (await this.jsm.streams.info(this.eventsStream)).config;
  }

  /** The stream's first and last sequence, size and creation time. */
  async streamState(): Promise<StreamState> {
    const info = await this.jsm.streams.info(this.eventsStream);
    return {
      firstSeq: info.state.first_seq,
      lastSeq: info.state.last_seq,
      messages: info.state.messages,
      created: info.created,
    };
  }

  /** Every message of the stream, data and headers, in order: for audits and tests. */
  async *allMessages(): AsyncIterable<StoredMessage> {
    const { firstSeq, lastSeq } = await this.streamState();
    for (let seq = firstSeq; seq <= lastSeq && seq > 0; seq++) {
      const message = await this.jsm.streams.getMessage(this.eventsStream, { seq }).catch(() => null);
      if (message) {
        yield { seq, subject: message.subject, data: message.data, headers: message.header.toString() };
      }
    }
  }

  /** How many messages each subject matching `filter` holds. */
  async subjectCounts(filter: string): Promise<Map<string, number>> {
    const info = await this.jsm.streams.info(this.eventsStream, { subjects_filter: filter });
    return new Map(Object.entries(info.state.subjects ?? {}));
  }

  /**
   * The stream's messages on `filter` from stream sequence `fromSeq` through `toSeq`, at
   * most `max` of them, in order, read directly from the stream (no consumer, nothing
   * decoded): for a consumer that must see what its delivery skipped.
   */
  async readRange(filter: string, fromSeq: number, toSeq: number, max: number): Promise<RawMessage[]> {
    const messages: RawMessage[] = [];
    let from = fromSeq;
    while (messages.length < max && from <= toSeq) {
      const want = Math.min(READ_BATCH, max - messages.length);
      let received = 0;
      try {
        const batch = await this.jsm.direct.getBatch(this.eventsStream, {
          seq: from,
          next_by_subj: filter,
          batch: want,
        });
        for await (const message of batch) {
          received += 1;
          from = message.seq + 1;
          if (message.seq <= toSeq && messages.length < max)
            messages.push({
              seq: message.seq,
              subject: message.subject,
              data: message.data,
              storedMs: message.time.getTime(),
            });
        }
      } catch (error) {
        if (!isNotFound(error)) throw error;
      }
      if (received < want) break;
    }
    return messages;
  }

  /**
   * The last event on each subject matching any of `filters` (wildcards allowed): e.g. each
   * run's last RunHeld. For state rebuilt at start. Read through a short-lived consumer
   * that delivers the last message per subject, so it is not bounded by the 1,024 subjects
   * a direct multi-last get may match. A last message that is no event a reader can use is
   * quarantined and left out.
   */
  async lastOnSubjects(filters: string[]): Promise<StoredEvent[]> {
    const created = await this.jsm.consumers.add(this.eventsStream, {
      filter_subjects: filters,
      deliver_policy: DeliverPolicy.LastPerSubject,
      ack_policy: AckPolicy.None,
      mem_storage: true,
      // Removed by the server if this process dies before it deletes the consumer itself.
      inactive_threshold: nanos(60_000),
    });
    try {
      const events: StoredEvent[] = [];
      // Only what was there when the consumer was made; the caller's watch brings the rest.
      let left = created.num_pending;
      const consumer = await this.js.consumers.get(this.eventsStream, created.name);
      while (left > 0) {
        const batch = await consumer.fetch({ max_messages: Math.min(left, READ_BATCH), expires: 5_000 });
        let received = 0;
        for await (const message of batch) {
          received += 1;
          left -= 1;
          const envelope = this.readStored(message);
          if (envelope !== undefined) events.push({ envelope, streamSequence: message.seq });
        }
        if (received === 0) {
          throw new BusUnavailableError(`reading the last events of ${filters.join(", ")} stalled`);
        }
      }
      return events;
    } finally {
      await this.jsm.consumers.delete(this.eventsStream, created.name).catch(() => undefined);
    }
  }

  /**
   * How many events of one type each run has, from the stream's per-subject counts (no
   * message is read). Large deployments page through many subjects: meant for periodic
   * housekeeping, not the request path.
   */
  async countsByRun(type: EventType): Promise<Map<string, number>> {
    const counts = new Map<string, number>();
    for (const [subject, count] of await this.subjectCounts(this.subjects.ofType(type))) {
      counts.set(this.subjects.runIdOf(subject), count);
    }
    return counts;
  }

  /** Creates the durable pull consumer, or updates what JetStream allows to change. */
  async ensureDurable(spec: DurableSpec): Promise<Consumer> {
    const config: Partial<ConsumerConfig> = {
      durable_name: spec.name,
      ack_policy: spec.ackPolicy === "all" ? AckPolicy.All : AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: spec.filterSubject,
      ack_wait: nanos(spec.ackWaitMs),
      max_ack_pending: spec.maxAckPending,
      max_deliver: -1,
    };
    const existing = await this.jsm.consumers.info(this.eventsStream, spec.name).catch((error: unknown) => {
      if (isApiError(error, JetStreamApiCodes.ConsumerNotFound)) return undefined;
      throw error;
    });
    if (existing === undefined) {
      await this.jsm.consumers.add(this.eventsStream, config);
    } else {
      if (existing.config.ack_policy !== config.ack_policy) {
        throw new BusConfigurationError(
          `consumer ${spec.name} acknowledges with policy "${existing.config.ack_policy}", not "${config.ack_policy}"; delete it to let Holdfast recreate it`,
        );
      }
      const c = existing.config;
      if (
        c.filter_subject !== config.filter_subject ||
        c.ack_wait !== config.ack_wait ||
        c.max_ack_pending !== config.max_ack_pending
      ) {
        await this.jsm.consumers.update(this.eventsStream, spec.name, {
          filter_subject: config.filter_subject,
          ack_wait: config.ack_wait,
          max_ack_pending: config.max_ack_pending,
        });
      }
    }
    return this.js.consumers.get(this.eventsStream, spec.name);
  }

  /**
   * One of Holdfast's key-value buckets under this bus's prefix, for small pointers a
   * service must share across instances and restarts. Opened as it is; made only when it
   * is missing and this credential may make it (an admin's, or a server without
   * authorization): a service's credential may not, and says so.
   */
  async keyValue(bucket: BucketName): Promise<KV> {
    const name = this.bucketName(bucket);
    const info = await this.jsm.streams.info(`KV_${name}`).catch((error: unknown) => {
      if (isApiError(error, JetStreamApiCodes.StreamNotFound)) return undefined;
      throw error;
    });
    if (info === undefined) {
      try {
        return await this.createBucket(bucket);
      } catch (error) {
        throw this.unprovisioned(`the bucket ${name}`, error);
      }
    }
    // Opened as it is (no create: that would be a reconfiguration), reading it the way it allows.
    return new Kvm(this.js).open(name, { allow_direct: info.config.allow_direct === true });
  }

  /** Makes every bucket Holdfast keeps (or brings it to this version's settings): an admin's job. */
  async provisionBuckets(): Promise<void> {
    for (const bucket of BUCKET_NAMES) await this.createBucket(bucket);
  }

  private createBucket(bucket: BucketName): Promise<KV> {
    const ttl = bucketTtlMs(bucket);
    return new Kvm(this.js).create(this.bucketName(bucket), {
      history: 1,
      replicas: this.options.replicas ?? 1,
      storage: StorageType.File,
      ...(ttl === undefined ? {} : { ttl }),
    });
  }

  /** What a service whose credential may not make `what` is told when it is missing. */
  private unprovisioned(what: string, cause: unknown): Error {
    if (isPermissionError(cause)) {
      return new BusConfigurationError(
        `${what} does not exist, and this process's NATS credential may not make it: provision it with an admin credential first (holdfast provision; holdfast up does it)`,
        { cause },
      );
    }
    return cause instanceof Error ? cause : new Error(String(cause));
  }

  /**
   * Puts `value` under `key` in a bucket `keyValue` made, and resolves once the bucket
   * has it: `KV.put` through the bus's publisher, so a put made on the hot path costs what
   * an append does (a write shared with the round's other publishes, no request timer or
   * error object of its own). `key` must be a valid KV key.
   */
  async putValue(bucket: BucketName, key: string, value: string): Promise<void> {
    const ack = await this.publisher.publish(`$KV.${this.bucketName(bucket)}.${key}`, Buffer.from(value));
    if (!ack.ok) throw publishFailed(ack, `put to ${this.bucketName(bucket)}`);
  }

  private bucketName(bucket: BucketName): string {
    return `${this.subjects.prefix.toUpperCase()}_${bucket}`;
  }

  /**
   * Pulls from a durable pull consumer in batches of what it holds now (see Puller): for
   * a consumer that takes the log in batches, e.g. every second.
   */
  puller(durable: string): Puller {
    return new Puller(this.nc, this.eventsStream, durable, this.options.appendTimeoutMs ?? 5_000, this.inbox);
  }

  /** An existing durable consumer, as it is (for a reader that must not reconfigure it). */
  durable(name: string): Promise<Consumer> {
    return this.js.consumers.get(this.eventsStream, name);
  }

  /** Starts delivery of a durable consumer at `seq` (JetStream consumer reset, nats-server 2.14+). */
  async resetDurable(name: string, seq: number): Promise<void> {
    await this.jsm.consumers.reset(this.eventsStream, name, seq);
  }

  /** A durable consumer's delivery state, or undefined when it does not exist. */
  async durableState(
    name: string,
  ): Promise<{ delivered: number; ackFloor: number; pending: number; ackPending: number } | undefined> {
    const info = await this.jsm.consumers.info(this.eventsStream, name).catch((error: unknown) => {
      if (isApiError(error, JetStreamApiCodes.ConsumerNotFound)) return undefined;
      throw error;
    });
    if (info === undefined) return undefined;
    return {
      delivered: info.delivered.stream_seq,
      ackFloor: info.ack_floor.stream_seq,
      pending: info.num_pending,
      ackPending: info.num_ack_pending,
    };
  }

  /** Finishes what is in flight, then disconnects. */
  async close(): Promise<void> {
    // Appends of this round (and deferred ones) go out before the connection drains.
    this.publisher.flush();
    this.publisher.close();
    if (!this.nc.isClosed()) await this.nc.drain();
  }

  /** Drops the connection at once, as a crash would (for tests of what survives one). */
  async abandon(): Promise<void> {
    this.publisher.close();
    if (!this.nc.isClosed()) await this.nc.close();
  }
}

function isApiError(error: unknown, code: number): boolean {
  return error instanceof JetStreamApiError && error.code === code;
}

/** Why a publish failed, as the error a caller can act on: refused for good, or worth a retry. */
function publishFailed(ack: Extract<PubAck, { ok: false }>, what: string): BusError {
  if (ack.errCode === PERMISSION_DENIED || ack.errCode === TOO_LARGE) {
    return new BusRejectedError(`${what} refused: ${ack.description}`);
  }
  return new BusUnavailableError(`${what} failed: ${ack.description}`);
}

/** NATS refused an operation this connection's credential is not allowed. */
function isPermissionError(error: unknown): boolean {
  return (
    error instanceof Error && /permission|authoriz/i.test(`${error.message} ${String(error.cause ?? "")}`)
  );
}

function isNotFound(error: unknown): boolean {
  return error instanceof Error && /message not found|no message found/i.test(error.message);
}

/** How long a watch waits between reads of the stream, unless told otherwise. */
const DEFAULT_WATCH_LINGER_MS = 100;
/** The longest a watch waits between reads while the stream is quiet, unless told otherwise. */
const DEFAULT_WATCH_IDLE_MS = 250;
/** The longest a watch waits before trying a failed read again. */
const WATCH_RETRY_MAX_MS = 2_000;
/** A watch's consumer nobody pulls from for this long is removed by the server. */
const WATCH_INACTIVE_MS = 30_000;
/** Events a follow keeps requested ahead of its handler. */
const FOLLOW_BUFFER = 256;
/** A follow's pull requests live this long; the server sends heartbeats at half of it. */
const FOLLOW_EXPIRES_MS = 4_000;
/** A follow that has heard nothing (no event, heartbeat or expired pull) for this long starts a new consumer. */
const FOLLOW_SILENCE_MS = 5_000;

/**
 * The expected-sequence check failed: 10071 names the subject's actual last sequence; a
 * replicated stream answers 10164, without it, when another append of the subject is
 * still in flight in the stream's raft group.
 */
const WRONG_LAST_SEQUENCE = new Set([JetStreamApiCodes.StreamWrongLastSequence, 10164]);
/**
 * Refusals that say the append may yet succeed as it is: 10158, an append with this
 * message id is itself still in flight (a retry racing its original); 10163, the stream
 * cannot check the expected sequence yet (a new leader catching up).
 */
const SETTLES_LATER = new Set([10158, 10163]);

function wrongLastSequence(description: string): number | undefined {
  const match = /wrong last sequence: (\d+)/.exec(description);
  return match ? Number(match[1]) : undefined;
}

/**
 * The headers every event is published with: its id as the message id (a retried publish
 * is deduplicated), its type and schema version (readers filter and upcast without
 * decoding), and its encoding.
 */
function eventHeaders(envelope: Envelope): MsgHdrs {
  const h = headers();
  h.set("Nats-Msg-Id", envelope.id);
  h.set("Holdfast-Type", envelope.type);
  h.set("Holdfast-Schema-Version", String(envelope.schemaVersion));
  h.set("Content-Type", "application/protobuf");
  return h;
}
