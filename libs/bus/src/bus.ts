import type { Envelope, EventType, QuarantinedEvent, StoredEnvelope, Subjects } from "@holdfast/events";
import { subjects as subjectsFor } from "@holdfast/events";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { type ConnectionOptions, connect, errors, type NatsConnection } from "@nats-io/transport-node";
import { inboxPrefix, type Principal } from "./access.js";
import { authenticatorFrom } from "./authenticator.js";
import type { BucketLimits, BucketName } from "./buckets.js";
import { Consumers } from "./consumers.js";
import { BusConfigurationError, BusUnavailableError } from "./errors.js";
import { Buckets } from "./kv.js";
import { Link } from "./link.js";
import { EventLog } from "./log.js";
import type {
  AppendResult,
  DurableSpec,
  DurableState,
  KeyValue,
  Puller,
  RawMessage,
  RunHistory,
  StoredEvent,
  StoredMessage,
  StreamSettings,
  StreamState,
  Watch,
  WatchedEvent,
} from "./model.js";
import { Provisioning } from "./provision.js";
import type { QuarantineCounts, QuarantineLog } from "./quarantine.js";
import { Watches } from "./watches.js";

// Holdfast's only door to NATS, in parts: the log (appends, reads: log.ts, with the one
// batch reader in reader.ts), live views of it (watches.ts), durable consumers
// (consumers.ts), the key-value buckets (kv.ts), and the stream's own making
// (provision.ts). This file puts them behind one Bus; none of them hands out a NATS type.

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

/** Connects to NATS. The connection reconnects forever; callers see errors per operation. */
export function connectBus(options: BusOptions): Promise<Bus> {
  return Bus.connect(options);
}

async function openLink(options: BusOptions): Promise<Link> {
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
  return new Link(nc, jetstream(nc), jsm, subjectsFor(options.prefix), options);
}

/**
 * Holdfast's only door to NATS: appends with per-run order, reads, the live watch, KV
 * buckets, durable consumers. No other package touches a NATS connection, and nothing the
 * bus hands out is a NATS type.
 */
export class Bus {
  /** Connects to NATS (see connectBus). */
  static async connect(options: BusOptions): Promise<Bus> {
    return new Bus(await openLink(options));
  }

  readonly subjects: Subjects;
  private readonly provisioning: Provisioning;
  private readonly log: EventLog;
  private readonly watches: Watches;
  private readonly consumers: Consumers;
  private readonly buckets: Buckets;
  private reconnecting = false;

  private constructor(private readonly link: Link) {
    this.subjects = link.subjects;
    this.provisioning = new Provisioning(link);
    this.log = new EventLog(link, this.provisioning);
    this.consumers = new Consumers(link);
    this.watches = new Watches(link, this.provisioning, this.consumers);
    this.buckets = new Buckets(link);
    void this.followStatus();
  }

  /**
   * Reads a message of the log as an event: the event, or undefined when it is none a
   * reader can use (not an envelope, a type its payload or subject disagrees with, an
   * integer out of range), which is quarantined: counted and told once, and passed over.
   * Every read of this bus goes through here; a watch's handler calls it itself.
   */
  decode(event: WatchedEvent): StoredEnvelope | undefined {
    return this.link.readStored({ seq: event.streamSequence, subject: event.subject, data: event.data });
  }

  /**
   * Sets aside an event a reader found it cannot use after decoding it (a run's event that
   * is not its next): counted and told once, like those the bus quarantines itself.
   */
  quarantined(event: QuarantinedEvent): void {
    this.link.quarantine.add(event);
  }

  /** The events this process has set aside since it started, in all and by reason. */
  get quarantineCounts(): QuarantineCounts {
    return this.link.quarantine.counts;
  }

  /** False while the connection to NATS is down (appends would wait, then fail). */
  get connected(): boolean {
    return !this.link.nc.isClosed() && !this.reconnecting;
  }

  private async followStatus(): Promise<void> {
    for await (const s of this.link.nc.status()) {
      if (s.type === "disconnect" || s.type === "reconnecting") this.reconnecting = true;
      else if (s.type === "reconnect") this.reconnecting = false;
      else if (s.type === "error" && s.error instanceof errors.PermissionViolationError) {
        if (s.error.operation === "publish") this.link.publisher.refused(s.error.subject, s.error.message);
      }
    }
  }

  get eventsStream(): string {
    return this.link.stream;
  }

  /**
   * Creates the event stream, or brings an existing one to the configuration this version
   * wants. Safe to call from every service at every start: a stream as wanted is only
   * looked at, and only a credential allowed to (an admin's) can make or change it.
   */
  provision(): Promise<void> {
    return this.provisioning.provision();
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
  append(
    envelope: Envelope,
    expectedLastStreamSequence: number,
    options?: { defer?: boolean },
  ): Promise<AppendResult> {
    return this.log.append(envelope, expectedLastStreamSequence, options);
  }

  /**
   * Appends one event about a provider key (no run, no expected sequence: each is a
   * reading that stands alone) on the key's own subject; its id dedupes a retried publish.
   */
  appendKeyEvent(keyId: string, envelope: Envelope): Promise<void> {
    return this.log.appendKeyEvent(keyId, envelope);
  }

  /**
   * Appends one event about an agent (its deployment: no run, no expected sequence) on the
   * agent's own subject, and waits for the log to take it; its id dedupes a retried publish.
   */
  appendAgentEvent(agent: string, envelope: Envelope): Promise<number> {
    return this.log.appendAgentEvent(agent, envelope);
  }

  /**
   * Sends deferred appends, and those waiting for the end of this round of I/O, now: a
   * caller about to wait on one of them should not wait the deferral out.
   */
  flushDeferred(): void {
    this.link.publisher.flush();
  }

  /**
   * The events of one run in order, read directly from the stream (no consumer needed):
   * all of them, or those after stream sequence `after` (what a reader that knows the run
   * up to there is missing).
   */
  readRun(runId: string, after = 0): Promise<RunHistory> {
    return this.log.readRun(runId, after);
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
  watch(
    handler: (event: WatchedEvent) => void,
    options?: { afterSeq?: number; keys?: boolean; lingerMs?: number; idleMs?: number },
  ): Promise<Watch> {
    return this.watches.watch(handler, options);
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
  follow(
    types: readonly EventType[],
    handler: (event: WatchedEvent) => void,
    options?: { afterSeq?: number; keys?: boolean; agents?: boolean },
  ): Promise<Watch> {
    return this.watches.follow(types, handler, options);
  }

  /**
   * Each event of one run from now on, the moment it is stored, to `handler` (the stream
   * republishes stored events; no consumer is made). Until the returned function is
   * called. Core NATS: an event missed across a reconnect is not sent again, so a holder
   * of the run's state checks each event follows the last it knew.
   */
  tail(runId: string, handler: (event: WatchedEvent) => void): () => void {
    return this.watches.tail(runId, handler);
  }

  /**
   * Every event from `startTimeMs` through stream sequence `toSeq`, in order, read directly
   * from the stream a batch at a time (no consumer): for state rebuilt from a period of the
   * log at start, before a watch takes over after `toSeq`. What is no event a reader can
   * use is quarantined and passed over. Resolves with the number of events handed on.
   */
  readSince(startTimeMs: number, toSeq: number, handler: (event: StoredEvent) => void): Promise<number> {
    return this.log.readSince(startTimeMs, toSeq, handler);
  }

  /** The event stream's configuration as JetStream holds it. */
  streamConfig(): Promise<StreamSettings> {
    return this.provisioning.streamSettings();
  }

  /** The stream's first and last sequence, size and creation time. */
  streamState(): Promise<StreamState> {
    return this.provisioning.streamState();
  }

  /** Every message of the stream, data and headers, in order: for audits and tests. */
  allMessages(): AsyncIterable<StoredMessage> {
    return this.log.allMessages();
  }

  /** How many messages each subject matching `filter` holds. */
  subjectCounts(filter: string): Promise<Map<string, number>> {
    return this.provisioning.subjectCounts(filter);
  }

  /**
   * The stream's messages on `filter` from stream sequence `fromSeq` through `toSeq`, at
   * most `max` of them, in order, read directly from the stream (no consumer, nothing
   * decoded): for a consumer that must see what its delivery skipped.
   */
  readRange(filter: string, fromSeq: number, toSeq: number, max: number): Promise<RawMessage[]> {
    return this.log.readRange(filter, fromSeq, toSeq, max);
  }

  /**
   * The last event on each subject matching any of `filters` (wildcards allowed): e.g. each
   * run's last RunHeld. For state rebuilt at start. Read through a short-lived consumer
   * that delivers the last message per subject, so it is not bounded by the 1,024 subjects
   * a direct multi-last get may match. A last message that is no event a reader can use is
   * quarantined and left out.
   */
  lastOnSubjects(filters: string[]): Promise<StoredEvent[]> {
    return this.log.lastOnSubjects(filters);
  }

  /**
   * How many events of one type each run has, from the stream's per-subject counts (no
   * message is read). Large deployments page through many subjects: meant for periodic
   * housekeeping, not the request path.
   */
  countsByRun(type: EventType): Promise<Map<string, number>> {
    return this.log.countsByRun(type);
  }

  /** Creates the durable pull consumer, or updates what JetStream allows to change. */
  ensureDurable(spec: DurableSpec): Promise<void> {
    return this.consumers.ensureDurable(spec);
  }

  /**
   * One of Holdfast's key-value buckets under this bus's prefix, for small pointers a
   * service must share across instances and restarts. Opened as it is; made only when it
   * is missing and this credential may make it (an admin's, or a server without
   * authorization): a service's credential may not, and says so.
   */
  keyValue(bucket: BucketName): Promise<KeyValue> {
    return this.buckets.keyValue(bucket);
  }

  /** Makes every bucket Holdfast keeps (or brings it to this version's settings): an admin's job. */
  provisionBuckets(limits?: BucketLimits): Promise<void> {
    return this.buckets.provisionBuckets(limits);
  }

  /**
   * Puts `value` under `key` in a bucket `keyValue` made, and resolves once the bucket
   * has it: a KV put through the bus's publisher, so a put made on the hot path costs what
   * an append does (a write shared with the round's other publishes, no request timer or
   * error object of its own). `key` must be a valid KV key. `deferred`: it may wait a
   * moment to share a write with the next publish (as a call's outcome does).
   */
  putValue(
    bucket: BucketName,
    key: string,
    value: string,
    options: { deferred?: boolean } = {},
  ): Promise<void> {
    return this.buckets.putValue(bucket, key, value, options.deferred === true);
  }

  /** What a bucket holds: its keys' current values and the bytes JetStream keeps for them. */
  bucketSize(bucket: BucketName): Promise<{ values: number; bytes: number }> {
    return this.buckets.size(bucket);
  }

  /**
   * Pulls from a durable pull consumer in batches of what it holds now (see Puller): for
   * a consumer that takes the log in batches, e.g. every second.
   */
  puller(durable: string): Puller {
    return this.consumers.puller(durable);
  }

  /** Starts delivery of a durable consumer at `seq` (JetStream consumer reset, nats-server 2.14+). */
  resetDurable(name: string, seq: number): Promise<void> {
    return this.consumers.resetDurable(name, seq);
  }

  /** A durable consumer's delivery state, or undefined when it does not exist. */
  durableState(name: string): Promise<DurableState | undefined> {
    return this.consumers.durableState(name);
  }

  /** Finishes what is in flight, then disconnects. */
  async close(): Promise<void> {
    // Appends of this round (and deferred ones) go out before the connection drains.
    this.link.publisher.flush();
    this.link.publisher.close();
    if (!this.link.nc.isClosed()) await this.link.nc.drain();
  }

  /** Drops the connection at once, as a crash would (for tests of what survives one). */
  async abandon(): Promise<void> {
    this.link.publisher.close();
    if (!this.link.nc.isClosed()) await this.link.nc.close();
  }
}
