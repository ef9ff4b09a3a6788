import { setTimeout as sleep } from "node:timers/promises";
import {
  decodeEnvelope,
  type Envelope,
  type EventType,
  encodeEnvelope,
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
import { connect, headers, type NatsConnection, nanos } from "@nats-io/transport-node";
import {
  BusConfigurationError,
  BusError,
  BusRejectedError,
  BusUnavailableError,
  ConcurrencyError,
} from "./errors.js";
import { AsyncPublisher } from "./publisher.js";

export interface BusOptions {
  /** One URL or a comma-separated list, e.g. nats://127.0.0.1:4222. */
  servers: string;
  /** Subject and stream prefix: one deployment (or one test) per prefix. */
  prefix: string;
  /** Connection name shown by `nats server report connections`. */
  name: string;
  /** JetStream replicas for streams this bus creates (3 in a production cluster). */
  replicas?: number;
  /** How long an append waits for the stream's acknowledgement. */
  appendTimeoutMs?: number;
  /** Longest wait of a deferred append for others to share its socket write (default 2 ms). */
  deferMs?: number;
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

/** An event as the watch delivers it: its run, type and place, its bytes not yet decoded. */
export interface WatchedEvent {
  runId: string;
  /** The event type, from the subject (a type this version may not know). */
  type: string;
  streamSequence: number;
  data: Uint8Array;
}

/** A live view of every event appended from now on. */
export interface Watch {
  /** Called when the watch may have missed events (it reconnected): cached state is suspect. */
  onGap(handler: () => void): void;
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
  data: Uint8Array;
}

export interface RunHistory {
  runId: string;
  events: StoredEvent[];
  /** Stream sequence of the run's last event; 0 for a run with no events. */
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
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers: options.servers.split(",").map((s) => s.trim()),
      name: options.name,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      // Async stack traces cost an Error (and its stack) per request: a measurable share of
      // the gateway's hot path, for context that our typed errors already carry.
      noAsyncTraces: true,
    });
  } catch (cause) {
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

  constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    subjects: Subjects,
    private readonly options: BusOptions,
  ) {
    this.subjects = subjects;
    this.publisher = new AsyncPublisher(nc, options.appendTimeoutMs ?? 5_000, options.deferMs ?? 2);
    void this.followStatus();
  }

  private reconnecting = false;
  private readonly gapHandlers = new Set<() => void>();

  /** False while the connection to NATS is down (appends would wait, then fail). */
  get connected(): boolean {
    return !this.nc.isClosed() && !this.reconnecting;
  }

  private async followStatus(): Promise<void> {
    for await (const s of this.nc.status()) {
      if (s.type === "disconnect" || s.type === "reconnecting") this.reconnecting = true;
      else if (s.type === "reconnect") this.reconnecting = false;
      // Whatever the watch delivered meanwhile may be incomplete.
      if (s.type === "reconnect" || s.type === "slowConsumer") for (const gap of this.gapHandlers) gap();
    }
  }

  get eventsStream(): string {
    return this.subjects.eventsStream;
  }

  /**
   * Creates the event stream, or brings an existing one to the configuration this version
   * wants. Safe to call from every service at every start.
   */
  async provision(): Promise<void> {
    const want: Partial<StreamConfig> & { name: string } = {
      name: this.eventsStream,
      description: "Holdfast run events: the log every projection is derived from",
      subjects: [this.subjects.allRuns, this.subjects.allKeys],
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
        if (!isApiError(error, STREAM_NAME_IN_USE)) throw error;
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
      !current.subjects?.includes(this.subjects.allRuns) ||
      !current.subjects?.includes(this.subjects.allKeys);
    if (drift) {
      await this.jsm.streams.update(this.eventsStream, {
        ...current,
        subjects: [...new Set([...(current.subjects ?? []), this.subjects.allRuns, this.subjects.allKeys])],
        num_replicas: want.num_replicas,
        allow_direct: true,
        deny_delete: true,
        deny_purge: true,
      });
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
    const h = headers();
    h.set("Nats-Msg-Id", envelope.id);
    h.set("Nats-Expected-Last-Subject-Sequence", String(expectedLastStreamSequence));
    h.set("Nats-Expected-Last-Subject-Sequence-Subject", this.subjects.run(envelope.runId));
    h.set("Holdfast-Type", envelope.type);
    h.set("Holdfast-Schema-Version", String(envelope.schemaVersion));
    h.set("Content-Type", "application/protobuf");
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
    if (ack.errCode === 0 || SETTLES_LATER.has(ack.errCode)) {
      throw new BusUnavailableError(`append to ${this.eventsStream} failed: ${ack.description}`);
    }
    throw new BusRejectedError(`JetStream refused the append (${ack.errCode}): ${ack.description}`);
  }

  /**
   * Appends one event about a provider key (no run, no expected sequence: each is a
   * reading that stands alone) on the key's own subject; its id dedupes a retried publish.
   */
  async appendKeyEvent(keyId: string, envelope: Envelope): Promise<void> {
    const h = headers();
    h.set("Nats-Msg-Id", envelope.id);
    h.set("Holdfast-Type", envelope.type);
    h.set("Holdfast-Schema-Version", String(envelope.schemaVersion));
    h.set("Content-Type", "application/protobuf");
    const ack = await this.publisher.publishDeferred(
      this.subjects.keyEvent(keyId, envelope.type as EventType),
      encodeEnvelope(envelope),
      h,
    );
    if (!ack.ok) throw new BusUnavailableError(`append to ${this.eventsStream} failed: ${ack.description}`);
  }

  private async findLanded(subject: string, eventId: string): Promise<number | undefined> {
    const last = await this.jsm.direct
      .getMessage(this.eventsStream, { last_by_subj: subject })
      .catch(() => null);
    if (last && last.header.get("Nats-Msg-Id") === eventId) return last.seq;
    return undefined;
  }

  /** Sends deferred appends now: a caller about to wait on one of them should not wait the deferral out. */
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
    const events = parts.flat().sort((a, b) => a.streamSequence - b.streamSequence);
    return { runId, events, lastStreamSequence: events.at(-1)?.streamSequence ?? after };
  }

  /**
   * The events of one literal subject after stream sequence `after`, through `last`. A
   * direct get may be answered by a replica that is behind the one that named `last`:
   * the read goes on until it reaches `last`, so the run's history has no hole.
   */
  private async readSubject(subject: string, after: number, last: number): Promise<StoredEvent[]> {
    const events: StoredEvent[] = [];
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
            events.push({ envelope: decodeEnvelope(message.data), streamSequence: message.seq });
          }
        } catch (error) {
          if (!isNotFound(error)) throw error;
        }
        if (received < READ_BATCH || from > last) break;
      }
    }
    return events;
  }

  /**
   * Every event appended from now on (or after stream sequence `afterSeq`), in stream
   * order, to `handler` (synchronously; it must not throw). An ordered consumer: it follows the stream across reconnects and
   * recreates itself past a gap, calling the gap handlers so holders of cached state can
   * re-read.
   */
  async watch(
    handler: (event: WatchedEvent) => void,
    options: { afterSeq?: number; keys?: boolean } = {},
  ): Promise<Watch> {
    // Runs' events, or (keys) the provider keys' own events, whose run id is "".
    const filter = options.keys === true ? this.subjects.allKeys : this.subjects.allRuns;
    const gaps: (() => void)[] = [];
    // Fixed now, and moved on with every event delivered: a consumer recreated later
    // starts right after the last event this watch handed on.
    let after = options.afterSeq ?? (await this.streamState()).lastSeq;
    let stopped = false;
    let generation = 0;
    let aliveMs = Date.now();
    const open = async (): Promise<ConsumerMessages> => {
      const mine = ++generation;
      const consumer = await this.js.consumers.get(this.eventsStream, {
        filter_subjects: filter,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: after + 1,
      });
      const messages = await consumer.consume({
        max_messages: WATCH_BUFFER,
        expires: WATCH_EXPIRES_MS,
        callback: (message) => {
          if (mine !== generation || message.seq <= after) return;
          aliveMs = Date.now();
          after = message.seq;
          const subject = message.subject;
          handler({
            runId: options.keys === true ? "" : this.subjects.runIdOf(subject),
            type: subject.slice(subject.lastIndexOf(".") + 1),
            streamSequence: message.seq,
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

    // The client library recreates an ordered consumer once the server says it is gone;
    // one lost with its server (a cluster's stream leader killed) never says so, and the
    // library would wait on it until that server returns. Silence past two heartbeats
    // here means a new consumer, from the last event handed on: nothing missed, nothing
    // handed on twice.
    let reopening = false;
    const reopen = async () => {
      void current.close().catch(() => undefined);
      for (let delay = 250; !stopped; delay = Math.min(delay * 2, WATCH_EXPIRES_MS)) {
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
      if (stopped || reopening || Date.now() - aliveMs < WATCH_SILENCE_MS) return;
      reopening = true;
      void reopen().finally(() => {
        reopening = false;
      });
    }, WATCH_EXPIRES_MS / 4);
    watchdog.unref();

    return {
      onGap: (gap) => {
        gaps.push(gap);
        this.gapHandlers.add(gap);
      },
      stop: async () => {
        stopped = true;
        clearInterval(watchdog);
        for (const gap of gaps) this.gapHandlers.delete(gap);
        await current.close();
      },
    };
  }

  /**
   * Every event from `startTimeMs` through stream sequence `toSeq`, in order, read directly
   * from the stream a batch at a time (no consumer): for state rebuilt from a period of the
   * log at start, before a watch takes over after `toSeq`.
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
          handler({ envelope: decodeEnvelope(message.data), streamSequence: message.seq });
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
            messages.push({ seq: message.seq, data: message.data });
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
   * a direct multi-last get may match.
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
          events.push({ envelope: decodeEnvelope(message.data), streamSequence: message.seq });
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
   * A JetStream key-value bucket under this bus's prefix (created if missing), for small
   * pointers a service must share across instances and restarts.
   */
  async keyValue(bucket: string, options: { ttlMs?: number } = {}): Promise<KV> {
    const name = `${this.subjects.prefix.toUpperCase()}_${bucket}`;
    return new Kvm(this.js).create(name, {
      history: 1,
      replicas: this.options.replicas ?? 1,
      storage: StorageType.File,
      ...(options.ttlMs === undefined ? {} : { ttl: options.ttlMs }),
    });
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

function isNotFound(error: unknown): boolean {
  return error instanceof Error && /message not found|no message found/i.test(error.message);
}

/**
 * The expected-sequence check failed: 10071 names the subject's actual last sequence; a
 * replicated stream answers 10164, without it, when another append of the subject is
 * still in flight in the stream's raft group.
 */
/** Events a watch keeps requested ahead of its handler. */
const WATCH_BUFFER = 1_000;
/** A watch's pull requests live this long; the server sends heartbeats at half of it. */
const WATCH_EXPIRES_MS = 4_000;
/** A watch that has heard nothing (no event, heartbeat or expired pull) for this long starts a new consumer. */
const WATCH_SILENCE_MS = 5_000;

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
