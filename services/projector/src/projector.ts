import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import {
  type Analytics,
  bindProjection,
  type CheckpointKey,
  insertRows,
  readCheckpoint,
  writeCheckpoint,
} from "@holdfast/analytics";
import {
  type Bus,
  type Consumer,
  type ConsumerMessages,
  type JsMsg,
  Lease,
  type RawMessage,
} from "@holdfast/bus";
import { decodeEnvelope, EventDecodeError } from "@holdfast/events";
import type { Logger } from "@holdfast/log";
import { type ProjectedRows, project } from "./projection.js";

export interface ProjectorOptions {
  bus: Bus;
  analytics: Analytics;
  log: Logger;
  /** Durable consumer name; one projector (per partition) consumes it at a time. */
  consumer: string;
  batchSize: number;
  /** Longest wait, after a batch's first event, for more events to join it. */
  lingerMs?: number;
  /** Redelivery delay for a batch a dead projector took but never acknowledged. */
  ackWaitMs?: number;
  /**
   * Start delivery right after the checkpoint (JetStream consumer reset, nats-server
   * 2.14+), so a batch a crashed projector left unacknowledged does not wait out ack_wait.
   * Without it (or on an older server) that batch is redelivered later and skipped.
   */
  resetOnStart?: boolean;
  /** How long the consumer's lease lasts unrenewed before a standby projector takes over. */
  leaseMs?: number;
  /** This process, as the lease names it; unique per process. */
  holder?: string;
  /** Test seam: runs after a batch is in ClickHouse (checkpoint included) and before it is acknowledged. */
  afterInsert?: (batch: BatchInfo) => Promise<void>;
}

export interface BatchInfo {
  firstSeq: number;
  lastSeq: number;
  count: number;
}

export interface ProjectorStatus {
  running: boolean;
  /** "active" while this projector holds the consumer's lease and consumes; "standby" while it waits for it. */
  role: "active" | "standby";
  /** Who holds the consumer's lease, as last seen (this projector's holder id when active). */
  leaseHolder: string | null;
  /** Highest stream sequence projected into every table: the checkpoint. */
  projectedSeq: number;
  eventsProjected: number;
  lastError: string | null;
}

/** How long one pull for events lives; its heartbeats come at half of it. */
const PULL_EXPIRES_MS = 5_000;

/** One stint as the active projector, from acquiring the lease to losing or releasing it. */
interface Stint {
  active: boolean;
  /** The checkpoint as this stint last read or wrote it. */
  checkpoint: number;
  messages: ConsumerMessages | undefined;
  loop: Promise<void>;
}

class LeaseLostError extends Error {
  override readonly name = "LeaseLostError";
  constructor() {
    super("this projector no longer holds the consumer's lease");
  }
}

export const DEFAULT_LEASE_MS = 10_000;

/**
 * Projects the event log into ClickHouse, each event counted once.
 *
 * Inserting an event again is a no-op by key: the tables fold rows of one event into one
 * and the views read them FINAL. That makes every failure a replay. The checkpoint is a
 * row in ClickHouse (`projection_checkpoints`), written only after all of a batch's
 * tables have their rows; a batch cut short anywhere (between the tables, between the
 * parts of an insert that spans two months) leaves it behind, and the batch comes again.
 * At each (re)subscription the projector reads the checkpoint and resets the consumer to
 * the event after it.
 *
 * One projector per consumer is active at a time, holding a lease in the KV bucket
 * `<PREFIX>_LEASES`; others started on the same consumer stand by and take over when the
 * lease expires. An active projector that loses the lease stops consuming at once. A
 * former holder's late insert adds nothing (same keys) and its late checkpoint says
 * something already true; should its pull have taken events the new holder then never
 * sees, the new holder notices the hole in the sequences above its checkpoint and reads
 * those events straight from the stream.
 */
export class Projector {
  private consumer: Consumer | undefined;
  private key: CheckpointKey | undefined;
  private lease: Lease | undefined;
  private stint: Stint | undefined;
  private stopping = false;
  readonly status: ProjectorStatus = {
    running: false,
    role: "standby",
    leaseHolder: null,
    projectedSeq: 0,
    eventsProjected: 0,
    lastError: null,
  };

  constructor(private readonly options: ProjectorOptions) {}

  /** Binds the database to the stream, then becomes active or stands by. */
  async start(): Promise<void> {
    const { bus, analytics, consumer, batchSize } = this.options;
    const stream = await bus.streamState();
    await bindProjection(analytics, { stream: bus.eventsStream, created: stream.created });
    this.key = { stream: bus.eventsStream, subjects: bus.subjects.allRuns };
    this.status.projectedSeq = await readCheckpoint(analytics, this.key);
    this.consumer = await bus.ensureDurable({
      name: consumer,
      filterSubject: bus.subjects.allRuns,
      ackPolicy: "all",
      ackWaitMs: this.options.ackWaitMs ?? 30_000,
      maxAckPending: batchSize,
    });
    const holder = this.options.holder ?? `${hostname()}-${process.pid}#${randomBytes(3).toString("hex")}`;
    this.lease = new Lease({
      kv: await bus.keyValue("LEASES"),
      key: `projector.${consumer}`,
      holder,
      leaseMs: this.options.leaseMs ?? DEFAULT_LEASE_MS,
    });
    this.status.running = true;
    await this.lease.start({ acquired: () => this.activate(), lost: () => this.standBy() });
    this.status.leaseHolder = this.lease.holderSeen ?? null;
    if (this.status.role === "standby") {
      this.options.log.info(
        { consumer, holder: this.status.leaseHolder },
        "another projector holds the consumer; standing by",
      );
    }
  }

  /** Finishes the batch in hand, stops taking new ones and lets go of the lease. */
  async stop(): Promise<void> {
    this.stopping = true;
    const stint = this.stint;
    if (stint) {
      stint.active = false;
      await stint.messages?.close();
      await stint.loop;
    }
    await this.lease?.stop();
    this.status.running = false;
    this.status.role = "standby";
  }

  /** A standby's view of the projection: the active projector's checkpoint and who holds the lease. */
  async refresh(): Promise<void> {
    if (this.key === undefined || this.status.role === "active") return;
    this.status.leaseHolder = this.lease?.holderSeen ?? null;
    this.status.projectedSeq = await readCheckpoint(this.options.analytics, this.key);
  }

  private activate(): void {
    if (this.stopping) return;
    this.options.log.info(
      { consumer: this.options.consumer },
      "projector holds the consumer's lease; active",
    );
    const stint: Stint = { active: true, checkpoint: 0, messages: undefined, loop: Promise.resolve() };
    // A former stint still finishing its last step is left to finish: it no longer writes
    // a checkpoint or acknowledges, and its inserts add nothing.
    this.stint = stint;
    this.status.role = "active";
    this.status.leaseHolder = this.lease?.holderSeen ?? null;
    stint.loop = this.run(stint);
  }

  private standBy(): void {
    const stint = this.stint;
    this.status.role = "standby";
    this.status.leaseHolder = null;
    if (!stint) return;
    this.options.log.warn(
      { consumer: this.options.consumer },
      "projector lost the consumer's lease; standing by",
    );
    stint.active = false;
    // Not awaited: a stint stuck in a call must not hold up the handover.
    stint.messages?.close().catch(() => undefined);
  }

  private assertActive(stint: Stint): void {
    if (!stint.active || !this.lease?.held) throw new LeaseLostError();
  }

  /**
   * Takes events as they arrive and projects them in batches. A batch closes when it is
   * full, or `lingerMs` after its first event: a quiet log is projected within that
   * delay, a busy one in large inserts. Each insert costs ClickHouse a new part (files,
   * then merges): measured on embedded chDB, about 4 ms per insert against some 30 µs
   * per row, so a one-second linger takes the projector from ~1 ms of CPU per call to a
   * fraction of that at a few hundred calls a second. A batch that fails is retried,
   * in order, until it succeeds: skipping it would lose events from the projection.
   */
  private async run(stint: Stint): Promise<void> {
    const { log, batchSize, bus, analytics, consumer } = this.options;
    const lingerMs = this.options.lingerMs ?? 1_000;
    while (stint.active && !this.stopping) {
      try {
        stint.checkpoint = await readCheckpoint(analytics, this.key!);
        this.status.projectedSeq = stint.checkpoint;
        if (this.options.resetOnStart ?? true) {
          try {
            await bus.resetDurable(consumer, stint.checkpoint + 1);
          } catch (error) {
            log.info(
              { err: error },
              "consumer reset unavailable; unacknowledged events will be redelivered after ack_wait",
            );
          }
        }
        this.assertActive(stint);
        // Pulls that expire every 5 s, so heartbeats every 2.5 s: a pull left with a server
        // that died (a cluster's failover) is noticed in about 5 s, not the default 30.
        const messages = await this.consumer!.consume({ max_messages: batchSize, expires: PULL_EXPIRES_MS });
        stint.messages = messages;
        if (!stint.active) {
          await messages.close();
          break;
        }
        const iterator = messages[Symbol.asyncIterator]();
        let next: Promise<IteratorResult<JsMsg>> | undefined;
        let batch: JsMsg[] = [];
        let closesAt = 0;
        while (stint.active && !this.stopping) {
          next ??= iterator.next();
          const result: IteratorResult<JsMsg> | typeof LINGER_OVER =
            batch.length === 0
              ? await next
              : await Promise.race([
                  next,
                  sleep(closesAt - Date.now()).then((): typeof LINGER_OVER => LINGER_OVER),
                ]);
          if (result === LINGER_OVER) {
            // `next` stays pending: its event opens the next batch.
            await this.projectWithRetry(stint, batch);
            batch = [];
            continue;
          }
          next = undefined;
          if (result.done) break;
          batch.push(result.value);
          if (batch.length === 1) closesAt = Date.now() + lingerMs;
          if (batch.length >= batchSize) {
            await this.projectWithRetry(stint, batch);
            batch = [];
          }
        }
        if (batch.length > 0 && stint.active) await this.projectWithRetry(stint, batch);
      } catch (error) {
        await stint.messages?.close().catch(() => undefined);
        stint.messages = undefined;
        if (this.stopping || !stint.active) break;
        if (error instanceof LeaseLostError) {
          // Not renewed in time (a stalled event loop, NATS away) but not lost either: the
          // lease's next look says which, and the batch in hand is delivered again.
          await sleep((this.options.leaseMs ?? DEFAULT_LEASE_MS) / 3);
          continue;
        }
        this.status.lastError = (error as Error).message;
        log.error({ err: error }, "event consumer failed; resubscribing");
        await sleep(1_000);
      }
    }
  }

  private async projectWithRetry(stint: Stint, batch: JsMsg[]): Promise<void> {
    for (let backoffMs = 100; ; backoffMs = Math.min(backoffMs * 2, 5_000)) {
      try {
        await this.projectBatch(stint, batch);
        this.status.lastError = null;
        return;
      } catch (error) {
        if (error instanceof LeaseLostError || !stint.active) throw new LeaseLostError();
        this.status.lastError = (error as Error).message;
        this.options.log.error({ err: error }, "projection batch failed; retrying");
        if (this.stopping) throw error;
        await sleep(backoffMs);
      }
    }
  }

  private async projectBatch(stint: Stint, messages: JsMsg[]): Promise<void> {
    this.assertActive(stint);
    const bySeq = [...messages].sort((a, b) => a.seq - b.seq);
    const fresh = bySeq.filter((m) => m.seq > stint.checkpoint);
    const last = bySeq.at(-1)!;
    const info = { firstSeq: bySeq[0]!.seq, lastSeq: last.seq, count: messages.length };
    if (fresh.length > 0) {
      const lastSeq = fresh.at(-1)!.seq;
      if (follows(stint.checkpoint, fresh)) await this.projectEvents(stint, fresh);
      else await this.fillFromStream(stint, lastSeq);
    }
    await this.options.afterInsert?.(info);
    this.assertActive(stint);
    // Ack policy "all": acknowledging the highest message acknowledges the whole batch.
    await last.ackAck();
    this.status.eventsProjected += messages.length;
  }

  /**
   * Delivery skipped events above the checkpoint: a former holder's pull took them, or
   * they were acknowledged without being projected. They are read from the stream itself,
   * a batch at a time, so the checkpoint never passes an event that is not in the tables.
   */
  private async fillFromStream(stint: Stint, upTo: number): Promise<void> {
    const { bus, batchSize, log } = this.options;
    log.warn(
      { from: stint.checkpoint + 1, to: upTo },
      "events above the checkpoint were not delivered here; reading them from the stream",
    );
    while (stint.checkpoint < upTo) {
      const chunk = await bus.readRange(bus.subjects.allRuns, stint.checkpoint + 1, upTo, batchSize);
      if (chunk.length === 0) break;
      await this.projectEvents(stint, chunk);
    }
  }

  /** Inserts the rows of events that follow the checkpoint with no gap, then moves it past them. */
  private async projectEvents(stint: Stint, events: readonly RawMessage[]): Promise<void> {
    const { analytics } = this.options;
    const rows: ProjectedRows[] = [];
    for (const event of events) {
      try {
        rows.push(project({ envelope: decodeEnvelope(event.data), streamSequence: event.seq }));
      } catch (error) {
        if (!(error instanceof EventDecodeError)) throw error;
        // Skipping would lose the event from every projection: the batch is retried until
        // a projector that can read it takes over (e.g. after a rolling upgrade).
        throw new Error(
          `stream sequence ${event.seq} is not an event this projector can read: ${error.message}`,
        );
      }
    }
    const lastSeq = events.at(-1)!.seq;
    this.assertActive(stint);
    await insertRows(
      analytics,
      "raw_events_v2",
      rows.map((r) => r.raw),
    );
    this.assertActive(stint);
    await insertRows(
      analytics,
      "steps_v2",
      rows.flatMap((r) => (r.step ? [r.step] : [])),
    );
    this.assertActive(stint);
    await writeCheckpoint(analytics, this.key!, lastSeq);
    stint.checkpoint = lastSeq;
    this.status.projectedSeq = lastSeq;
  }
}

/** Whether the sequences continue the checkpoint with none missing. */
function follows(checkpoint: number, sorted: readonly { seq: number }[]): boolean {
  // The stream holds only run events, all on the consumer's filter, so its sequences are
  // dense there; were another subject ever added, a hole would just cost a direct read.
  return sorted.every((m, i) => m.seq === checkpoint + 1 + i);
}

const LINGER_OVER: unique symbol = Symbol("linger over");

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
