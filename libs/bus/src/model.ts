import type { QuarantinedEvent, StoredEnvelope } from "@holdfast/events";

// What the bus hands its callers: Holdfast's own shapes, no NATS type among them (a test
// reads the compiled declarations to keep it so), so a caller never depends on the client.

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

/** The event stream's configuration, as the server holds it. */
export interface StreamSettings {
  subjects: string[];
  storage: "file" | "memory";
  replicas: number;
  /** Any replica may answer a direct read. */
  allowDirect: boolean;
  /** No client may delete a message, or purge the stream. */
  denyDelete: boolean;
  denyPurge: boolean;
  /** Each stored message of `src` is also published on `dest`. */
  republish: { src: string; dest: string } | undefined;
  /** How long a message id is remembered, so a retried append is not stored twice. */
  duplicateWindowMs: number;
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

/** Where a durable consumer's delivery stands. */
export interface DurableState {
  /** The stream sequence of the last message delivered. */
  delivered: number;
  /** Everything through this stream sequence is acknowledged. */
  ackFloor: number;
  /** Messages not delivered yet. */
  pending: number;
  /** Messages delivered and not acknowledged yet. */
  ackPending: number;
}

/** A message a consumer delivered: where it is in the stream, its bytes, and how to acknowledge it. */
export interface PulledMessage {
  readonly seq: number;
  /**
   * The consumer's count of deliveries at this one (JetStream's consumer sequence):
   * consecutive across a consumer's deliveries, so a gap means one went to another puller.
   */
  readonly delivery: number;
  readonly subject: string;
  readonly data: Uint8Array;
  /** When the stream stored it (epoch ms). */
  readonly storedMs: number;
  /** Delivered before and not acknowledged in time. */
  readonly redelivered: boolean;
  /** The ack subject JetStream gave it. */
  readonly reply: string;
}

/**
 * Takes a durable consumer's messages in batches of whatever it holds now (Bus.puller);
 * one pull at a time.
 */
export interface Puller {
  /** Up to `max` messages the consumer has for delivery now; none when it has none. */
  pull(max: number): Promise<PulledMessage[]>;
  /**
   * Acknowledges `message` and, under ack policy "all", everything delivered before it;
   * resolves once JetStream confirms.
   */
  ackThrough(message: PulledMessage): Promise<void>;
  close(): void;
}

/** A key's value as a bucket holds it. */
export interface KeyEntry {
  key: string;
  value: string;
  /** The key's revision: what `update` and `delete` compare against. */
  revision: number;
  /** When the bucket stored this value (epoch ms, the server's clock). */
  storedMs: number;
}

/** A key as a watch hears it: put, or deleted. */
export interface KeyChange {
  key: string;
  /** The value put, or undefined when the key was deleted. */
  value: string | undefined;
  revision: number;
  /** When the bucket stored it (epoch ms, the server's clock). */
  storedMs: number;
  /**
   * A change stored after the watch began, or the last of the values it started with (from
   * which on every change is live): false only for the values it started with before the last.
   */
  update: boolean;
  /** With this one, every last value the watch started with has been heard. */
  caughtUp: boolean;
}

/** What a watch of a bucket hears, until `stop` (which ends the iteration). */
export interface KeyWatch extends AsyncIterable<KeyChange> {
  stop(): void;
}

/**
 * One of Holdfast's key-value buckets (Bus.keyValue): small pointers shared across
 * processes, each key with a revision for compare-and-set. Keys are NATS KV keys
 * (letters, digits, `-_=./`); callers encode what comes from outside.
 */
export interface KeyValue {
  /** The key's value, or undefined when it has none (never put, or deleted). */
  get(key: string): Promise<KeyEntry | undefined>;
  /** Puts `value` under `key`, whatever was there; resolves with the new revision. */
  put(key: string, value: string): Promise<number>;
  /** Puts `value` under a key that has none; KeyChangedError when it has one. */
  create(key: string, value: string): Promise<number>;
  /** Puts `value` only while the key is at `revision`; KeyChangedError when it moved on. */
  update(key: string, value: string, revision: number): Promise<number>;
  /** Deletes the key (only while it is at `revision`, when given). */
  delete(key: string, options?: { revision?: number }): Promise<void>;
  /** Every key that has a value. */
  keys(): Promise<string[]>;
  /**
   * Each key's last value, then every change as it is stored; only the changes with
   * `updatesOnly`.
   */
  watch(options?: { updatesOnly?: boolean }): Promise<KeyWatch>;
}
