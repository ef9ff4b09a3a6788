import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import {
  type Analytics,
  bindProjection,
  type CheckpointKey,
  insertQuarantined,
  insertRows,
  type QuarantinedRow,
  readCheckpoint,
  readLastRunSequences,
  readQuarantined,
  writeCheckpoint,
} from "@holdfast/analytics";
import {
  type Bus,
  Lease,
  type PulledMessage,
  type Puller,
  type QuarantineCounts,
  type RawMessage,
} from "@holdfast/bus";
import { decodeStored, outOfSequence, QUARANTINE_REASONS, type QuarantinedEvent } from "@holdfast/events";
import type { Logger } from "@holdfast/log";
import { type ProjectedRows, project } from "./projection.js";
import { RunSequences } from "./run-sequences.js";

export interface ProjectorOptions {
  bus: Bus;
  analytics: Analytics;
  log: Logger;
  /** Durable consumer name; one projector (per partition) consumes it at a time. */
  consumer: string;
  batchSize: number;
  /** How long the projector waits between takes of what the log holds (default 1 s): a busy log goes in large batches. */
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
  /**
   * Events of the stream the projection set aside (kept in `quarantined_events`), each
   * counted once: all it holds, by reason, across restarts.
   */
  quarantined: QuarantineCounts;
  lastError: string | null;
}

/** One stint as the active projector, from acquiring the lease to losing or releasing it. */
interface Stint {
  active: boolean;
  /** The checkpoint as this stint last read or wrote it. */
  checkpoint: number;
  puller: Puller | undefined;
  /** The consumer sequence of the last delivery its puller was given; undefined since it (re)subscribed. */
  lastDelivery: number | undefined;
  /** Ends the wait between two takes early (the stint is over). */
  wake: (() => void) | undefined;
  /** Where each run's fold stands as of the checkpoint. */
  runSequences: RunSequences;
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
    quarantined: {
      total: 0,
      by_reason: Object.fromEntries(QUARANTINE_REASONS.map((r) => [r, 0])),
    } as QuarantineCounts,
    lastError: null,
  };
  /** Stream sequence of the last event the projection set aside: one at or below it is counted already. */
  private lastQuarantinedSeq = 0;

  constructor(private readonly options: ProjectorOptions) {}

  /** Binds the database to the stream, then becomes active or stands by. */
  async start(): Promise<void> {
    const { bus, analytics, consumer, batchSize } = this.options;
    const stream = await bus.streamState();
    await bindProjection(analytics, { stream: bus.eventsStream, created: stream.created });
    this.key = { stream: bus.eventsStream, subjects: bus.subjects.allRuns };
    this.status.projectedSeq = await readCheckpoint(analytics, this.key);
    await this.countQuarantined();
    await bus.ensureDurable({
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
      stint.wake?.();
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
    await this.countQuarantined();
  }

  /** What the projection holds set aside, as the database says (another projector's too). */
  private async countQuarantined(): Promise<void> {
    const { byReason, lastSeq } = await readQuarantined(
      this.options.analytics,
      this.options.bus.eventsStream,
    );
    const counts = this.status.quarantined;
    counts.total = 0;
    for (const reason of QUARANTINE_REASONS) {
      counts.by_reason[reason] = byReason.get(reason) ?? 0;
      counts.total += counts.by_reason[reason];
    }
    this.lastQuarantinedSeq = lastSeq;
  }

  private activate(): void {
    if (this.stopping) return;
    this.options.log.info(
      { consumer: this.options.consumer },
      "projector holds the consumer's lease; active",
    );
    const stint: Stint = {
      active: true,
      checkpoint: 0,
      puller: undefined,
      lastDelivery: undefined,
      wake: undefined,
      loop: Promise.resolve(),
      runSequences: new RunSequences((runIds, before) =>
        readLastRunSequences(this.options.analytics, runIds, before),
      ),
    };
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
    stint.wake?.();
    stint.puller?.close();
  }

  private assertActive(stint: Stint): void {
    if (!stint.active || !this.lease?.held) throw new LeaseLostError();
  }

  /**
   * Takes what the log holds every `lingerMs` (at once while takes come back full) and
   * projects it as one batch. Each insert costs ClickHouse a new part (files, then
   * merges): measured on embedded chDB, about 4 ms per insert against some 30 µs per row,
   * so a one-second linger takes a busy log in large inserts. The take itself is one pull
   * answered with everything there (no pull left open for the server to feed an event at
   * a time: a wake-up per event cost the projector and nats-server more than the event's
   * projection). A batch that fails is retried, in order, until it succeeds: skipping it
   * would lose events from the projection.
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
        stint.puller?.close();
        const puller = bus.puller(consumer);
        stint.puller = puller;
        stint.lastDelivery = undefined;
        while (stint.active && !this.stopping) {
          const tookAt = Date.now();
          const batch = await puller.pull(batchSize);
          if (!stint.active) break;
          if (batch.length > 0) {
            const inTurn = deliveredInTurn(stint.lastDelivery, batch);
            stint.lastDelivery = batch.at(-1)!.delivery;
            await this.projectWithRetry(stint, puller, batch, inTurn);
          }
          if (batch.length < batchSize) await pause(stint, lingerMs - (Date.now() - tookAt));
        }
      } catch (error) {
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
    stint.puller?.close();
  }

  private async projectWithRetry(
    stint: Stint,
    puller: Puller,
    batch: PulledMessage[],
    inTurn: boolean,
  ): Promise<void> {
    for (let backoffMs = 100; ; backoffMs = Math.min(backoffMs * 2, 5_000)) {
      try {
        await this.projectBatch(stint, puller, batch, inTurn);
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

  /**
   * Projects a batch of deliveries. `inTurn`: the consumer gave this puller every delivery
   * since its last batch, none to another, so the batch holds every run event after the
   * ones before it, whatever holes its stream sequences have (the stream's other subjects:
   * provider keys' readings, agents' deployments). Otherwise, unless the sequences follow
   * the checkpoint with no hole at all, the stream itself says what is there.
   */
  private async projectBatch(
    stint: Stint,
    puller: Puller,
    messages: PulledMessage[],
    inTurn: boolean,
  ): Promise<void> {
    this.assertActive(stint);
    const bySeq = [...messages].sort((a, b) => a.seq - b.seq);
    const fresh = bySeq.filter((m) => m.seq > stint.checkpoint);
    const last = bySeq.at(-1)!;
    const info = { firstSeq: bySeq[0]!.seq, lastSeq: last.seq, count: messages.length };
    if (fresh.length > 0) {
      if (inTurn || follows(stint.checkpoint, fresh)) await this.projectEvents(stint, fresh);
      else await this.fillFromStream(stint, fresh);
    }
    await this.options.afterInsert?.(info);
    this.assertActive(stint);
    // Ack policy "all": acknowledging the highest message acknowledges the whole batch.
    await puller.ackThrough(last);
    this.status.eventsProjected += messages.length;
  }

  /**
   * Delivery may have skipped events above the checkpoint (a former holder's pull took
   * them, or they were acknowledged without being projected): the run events from the
   * checkpoint through the last delivered are read from the stream itself, a batch at a
   * time, and projected, so the checkpoint never passes an event that is not in the
   * tables. Those that were indeed not delivered are counted, and said.
   */
  private async fillFromStream(stint: Stint, delivered: readonly PulledMessage[]): Promise<void> {
    const { bus, batchSize, log } = this.options;
    const from = stint.checkpoint + 1;
    const upTo = delivered.at(-1)!.seq;
    const seen = new Set(delivered.map((m) => m.seq));
    let missing = 0;
    try {
      while (stint.checkpoint < upTo) {
        const chunk = await bus.readRange(bus.subjects.allRuns, stint.checkpoint + 1, upTo, batchSize);
        if (chunk.length === 0) break;
        for (const event of chunk) if (!seen.has(event.seq)) missing += 1;
        await this.projectEvents(stint, chunk);
      }
    } finally {
      if (missing > 0) {
        log.warn(
          { from, to: upTo, missing },
          "events above the checkpoint were not delivered here; read them from the stream",
        );
      }
    }
  }

  /**
   * Inserts the rows of events that follow the checkpoint with no gap, then moves it past
   * them. A message that is no event this projector can use is set aside in
   * `quarantined_events` with its bytes instead: retried, it would stop the projection for
   * good, since nothing can remove it from the log. That is one decodeStored refuses, or
   * a run's event that is not its run's next (as the run's own fold sets it aside: its
   * rows would disagree with the fold, and take the key of the run's real event at that
   * sequence). An event of a type or version this projector does not know keeps its place.
   */
  private async projectEvents(stint: Stint, events: readonly RawMessage[]): Promise<void> {
    const { analytics, bus } = this.options;
    const rows: ProjectedRows[] = [];
    const setAside: { event: QuarantinedEvent; row: QuarantinedRow }[] = [];
    const decoded = events.map((event) => ({ event, read: decodeStored(bus.subjects, event) }));
    // Where each run's fold stands before these events (so a replay of them finds the same).
    const runIds = new Set(decoded.flatMap(({ read }) => (read.envelope ? [read.envelope.runId] : [])));
    const lastSequence = await stint.runSequences.lookup([...runIds], stint.checkpoint, events[0]!.seq);
    for (const { event, read } of decoded) {
      let quarantined = read.quarantined;
      if (read.envelope !== undefined) {
        const { envelope } = read;
        const last = lastSequence.get(envelope.runId) ?? 0;
        if (envelope.sequence === last + 1) {
          lastSequence.set(envelope.runId, envelope.sequence);
          rows.push(project({ envelope, streamSequence: event.seq }));
          continue;
        }
        const where = { streamSequence: event.seq, subject: event.subject };
        quarantined = { ...outOfSequence(envelope, where, last), data: event.data };
      }
      setAside.push({ event: quarantined!, row: quarantinedRow(bus.eventsStream, quarantined!, event) });
    }
    const lastSeq = events.at(-1)!.seq;
    // What was set aside first: once the events after one are in the tables, it is on record.
    this.assertActive(stint);
    await insertQuarantined(
      analytics,
      setAside.map((q) => q.row),
    );
    for (const { event } of setAside) this.setAside(event);
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
    stint.runSequences.commit(lastSequence, lastSeq);
    this.status.projectedSeq = lastSeq;
  }

  /** Counts an event the projection set aside, once (a batch projected again holds it again), and tells it. */
  private setAside(event: QuarantinedEvent): void {
    this.options.bus.quarantined(event);
    if (event.streamSequence <= this.lastQuarantinedSeq) return;
    this.lastQuarantinedSeq = event.streamSequence;
    this.status.quarantined.total += 1;
    this.status.quarantined.by_reason[event.reason] += 1;
  }
}

function quarantinedRow(stream: string, event: QuarantinedEvent, stored: RawMessage): QuarantinedRow {
  return {
    stream,
    stream_seq: event.streamSequence,
    subject: event.subject,
    run_id: event.runId,
    type: event.type,
    reason: event.reason,
    detail: event.detail,
    data_base64: Buffer.from(event.data).toString("base64"),
    bytes: event.data.length,
    stored_at: stored.storedMs,
  };
}

/**
 * Whether the sequences continue the checkpoint with no hole at all. A hole is no proof of
 * a missed event: the stream's other subjects (`<prefix>.key.>`, `<prefix>.agent.>`) take
 * sequences the consumer's filter skips.
 */
function follows(checkpoint: number, sorted: readonly { seq: number }[]): boolean {
  return sorted.every((m, i) => m.seq === checkpoint + 1 + i);
}

/** Whether a batch's deliveries are the consumer's next ones after `previous`, none given elsewhere. */
function deliveredInTurn(previous: number | undefined, batch: readonly PulledMessage[]): boolean {
  return previous !== undefined && batch.every((m, i) => m.delivery === previous + 1 + i);
}

/** Waits `ms`, or less if the stint ends meanwhile. */
function pause(stint: Stint, ms: number): Promise<void> {
  if (ms <= 0) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      stint.wake = undefined;
      resolve();
    }
    stint.wake = done;
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
