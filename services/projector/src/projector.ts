import {
  type Analytics,
  bindProjection,
  highWater,
  insertRows,
  type ProjectedTable,
} from "@holdfast/analytics";
import type { Bus, Consumer, ConsumerMessages, JsMsg } from "@holdfast/bus";
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
  /** Test seam: runs after a batch is in ClickHouse and before it is acknowledged. */
  afterInsert?: (batch: { firstSeq: number; lastSeq: number; count: number }) => Promise<void>;
}

export interface ProjectorStatus {
  running: boolean;
  /** Highest stream sequence projected into every table. */
  projectedSeq: number;
  eventsProjected: number;
  lastError: string | null;
}

const TABLES: ProjectedTable[] = ["raw_events_v1", "steps_v1"];

/**
 * Projects the event log into ClickHouse, exactly once per event.
 *
 * Each table's checkpoint is the highest stream sequence it holds, read back from the
 * table itself. A batch is inserted (one block per table: all or nothing) and only then
 * acknowledged; a batch redelivered after a crash between the two is recognised by its
 * sequences and skipped. Because the checkpoint is a high-water mark, delivery must be in
 * stream order: the consumer allows exactly one batch in flight (max_ack_pending equals
 * the batch size), so a redelivered batch always comes back before anything newer.
 */
export class Projector {
  private readonly marks = new Map<ProjectedTable, number>();
  private consumer: Consumer | undefined;
  private messages: ConsumerMessages | undefined;
  private loop: Promise<void> | undefined;
  private stopping = false;
  readonly status: ProjectorStatus = { running: false, projectedSeq: 0, eventsProjected: 0, lastError: null };

  constructor(private readonly options: ProjectorOptions) {}

  async start(): Promise<void> {
    const { bus, analytics, consumer, batchSize, log } = this.options;
    const stream = await bus.jsm.streams.info(bus.eventsStream);
    await bindProjection(analytics, { stream: bus.eventsStream, created: stream.created });
    for (const table of TABLES) this.marks.set(table, await highWater(analytics, table));
    this.status.projectedSeq = Math.min(...this.marks.values());
    this.consumer = await bus.ensureDurable({
      name: consumer,
      filterSubject: bus.subjects.allRuns,
      ackPolicy: "all",
      ackWaitMs: this.options.ackWaitMs ?? 30_000,
      maxAckPending: batchSize,
    });
    if (this.options.resetOnStart ?? true) {
      try {
        await bus.jsm.consumers.reset(bus.eventsStream, consumer, this.status.projectedSeq + 1);
      } catch (error) {
        log.info(
          { err: error },
          "consumer reset unavailable; unacknowledged events will be redelivered after ack_wait",
        );
      }
    }
    this.status.running = true;
    this.loop = this.run();
  }

  /** Finishes the batch in hand, then stops taking new ones. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.messages?.close();
    await this.loop;
    this.status.running = false;
  }

  /**
   * Takes events as they arrive and projects them in batches. A batch closes when it is
   * full, or `lingerMs` after its first event: a quiet log is projected within that
   * delay, a busy one in large inserts (each insert is a new part for ClickHouse to
   * merge, so many tiny ones cost more than they save). A batch that fails is retried,
   * in order, until it succeeds: skipping it would lose events from the projection.
   */
  private async run(): Promise<void> {
    const { log, batchSize } = this.options;
    const lingerMs = this.options.lingerMs ?? 100;
    while (!this.stopping) {
      try {
        const messages = await this.consumer!.consume({ max_messages: batchSize });
        this.messages = messages;
        const iterator = messages[Symbol.asyncIterator]();
        let next: Promise<IteratorResult<JsMsg>> | undefined;
        let batch: JsMsg[] = [];
        let closesAt = 0;
        while (!this.stopping) {
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
            await this.projectWithRetry(batch);
            batch = [];
            continue;
          }
          next = undefined;
          if (result.done) break;
          batch.push(result.value);
          if (batch.length === 1) closesAt = Date.now() + lingerMs;
          if (batch.length >= batchSize) {
            await this.projectWithRetry(batch);
            batch = [];
          }
        }
        if (batch.length > 0) await this.projectWithRetry(batch);
      } catch (error) {
        if (this.stopping) break;
        this.status.lastError = (error as Error).message;
        log.error({ err: error }, "event consumer failed; resubscribing");
        await sleep(1_000);
      }
    }
  }

  private async projectWithRetry(batch: JsMsg[]): Promise<void> {
    for (let backoffMs = 100; ; backoffMs = Math.min(backoffMs * 2, 5_000)) {
      try {
        await this.projectBatch(batch);
        this.status.lastError = null;
        return;
      } catch (error) {
        this.status.lastError = (error as Error).message;
        this.options.log.error({ err: error }, "projection batch failed; retrying");
        if (this.stopping) throw error;
        await sleep(backoffMs);
      }
    }
  }

  private async projectBatch(messages: JsMsg[]): Promise<void> {
    const rows: ProjectedRows[] = [];
    for (const message of messages) {
      try {
        rows.push(project({ envelope: decodeEnvelope(message.data), streamSequence: message.seq }));
      } catch (error) {
        if (!(error instanceof EventDecodeError)) throw error;
        // Skipping would lose the event from every projection: the batch is retried until
        // a projector that can read it takes over (e.g. after a rolling upgrade).
        throw new Error(
          `stream sequence ${message.seq} is not an event this projector can read: ${error.message}`,
        );
      }
    }
    const firstSeq = messages[0]!.seq;
    const lastSeq = messages.at(-1)!.seq;
    await this.insertNew(
      "raw_events_v1",
      rows.map((r) => ({ seq: r.raw.stream_seq, row: r.raw })),
    );
    await this.insertNew(
      "steps_v1",
      rows.flatMap((r) => (r.step ? [{ seq: r.step.stream_seq, row: r.step }] : [])),
    );
    for (const table of TABLES) this.marks.set(table, Math.max(this.marks.get(table) ?? 0, lastSeq));
    await this.options.afterInsert?.({ firstSeq, lastSeq, count: messages.length });
    // Ack policy "all": acknowledging the last message acknowledges the whole batch.
    await messages.at(-1)!.ackAck();
    this.status.projectedSeq = lastSeq;
    this.status.eventsProjected += rows.length;
  }

  private async insertNew<Row extends { stream_seq: number }>(
    table: ProjectedTable,
    candidates: { seq: number; row: Row }[],
  ): Promise<void> {
    const mark = this.marks.get(table) ?? 0;
    const fresh = candidates.filter((c) => c.seq > mark).map((c) => c.row);
    await insertRows(this.options.analytics, table, fresh as never);
  }
}

const LINGER_OVER: unique symbol = Symbol("linger over");

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
