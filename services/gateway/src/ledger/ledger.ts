import { type Bus, BusError, ConcurrencyError, type Watch, type WatchedEvent } from "@holdfast/bus";
import {
  type DecodedEnvelope,
  decide,
  decodeEnvelope,
  evolve,
  initialState,
  makeEnvelope,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import type { Logger } from "@holdfast/log";

export interface LedgerOptions {
  bus: Bus;
  log: Logger;
  clock: () => number;
  newId: () => string;
  /** Runs kept in memory; beyond it the least recently used are dropped and re-read on demand. */
  maxCachedRuns?: number;
  /** Attempts to catch up and re-decide after another writer got to a run first (default 25). */
  maxConflictRetries?: number;
}

/** Who a run's events are labelled with. */
export interface RunLabels {
  tag: string;
  tenant: string;
}

export interface Executed {
  /** The events the command appended (none when it had already been carried out). */
  events: DecodedEnvelope[];
  state: RunState;
}

interface Entry {
  state: RunState;
  /** Stream sequence of the run's last event as this gateway knows it: the next append's expectation. */
  lastStreamSequence: number;
  /** Tail of this run's appends: they run one after another, in call order. */
  tail: Promise<unknown>;
  /** Appends of this process in flight; what the watch brings meanwhile waits in `heard`. */
  appending: number;
  heard: WatchedEvent[];
  /** The state may be behind the log (a gap in what the watch delivered): catch up before deciding. */
  stale: boolean;
  /** The state was read from (or confirmed by) the log, not just assumed new. */
  known: boolean;
  /** When another writer's event was last folded in (0: never): the run is shared. */
  foreignMs: number;
  /** Called whenever the watch moves the run on (conflict handling waits on it). */
  advanced: (() => void) | undefined;
}

// A run another gateway wrote to this recently gets its outcomes appended at once: a
// deferred outcome there would only lose the race with that gateway's next start.
const SHARED_RUN_MS = 60_000;
// How long a conflict waits for the watch to bring what another writer appended before
// reading it from the stream instead.
const WATCH_GRACE_MS = 20;

/**
 * The gateway's view of runs and the only way it appends to one.
 *
 * Each run it serves is kept in memory and follows the log: a watch on the event stream
 * folds in what other gateways append (a hold, a stop, their calls), so a decision is
 * made from current state without reading the run first. A run first seen here is taken
 * to be new; if it is not, its first append fails the stream's expected-sequence check
 * and the run is read. After a conflict the gateway takes what the watch brings (usually
 * already heard), or reads the run from the last event it knew, never from the start.
 *
 * Appends to one run are serialized in this process and guarded across processes by the
 * expected-last-subject-sequence check.
 */
export class RunLedger {
  private readonly runs = new Map<string, Entry>();
  private readonly pending = new Set<Promise<unknown>>();
  private watch: Watch | undefined;

  constructor(private readonly options: LedgerOptions) {}

  /** Starts following the log. */
  async start(): Promise<void> {
    this.watch = await this.options.bus.watch((event) => this.heard(event));
    // The watch may have missed events while disconnected: every cached run catches up.
    this.watch.onGap(() => {
      for (const entry of this.runs.values()) entry.stale = true;
    });
  }

  async stop(): Promise<void> {
    await this.drain();
    await this.watch?.stop();
  }

  /**
   * Decides `command` on the run as it stands and appends what it decides, once the log
   * has acknowledged it. Rejects with a BusError when the log cannot take it.
   */
  execute(runId: string, labels: RunLabels, command: RunCommand): Promise<Executed> {
    // An outcome of this run may be waiting to share a write (see executeDurably): this
    // command queues behind it, so it must not wait the deferral out.
    this.options.bus.flushDeferred();
    return this.enqueue(runId, (entry) =>
      this.executeNow(runId, labels, command, entry, this.idsFor(), false),
    );
  }

  /**
   * Like execute, but keeps retrying while the log is unreachable: for the outcomes of
   * calls that already happened, which must reach the log even if NATS blinks. The event
   * ids are fixed across those retries, so one that had in fact landed is not written twice.
   *
   * Nobody waits on these: their appends may wait a few milliseconds to share a socket
   * write with the next call's start (Bus.append's `defer`).
   */
  executeDurably(runId: string, labels: RunLabels, command: RunCommand): Promise<Executed> {
    return this.enqueue(runId, async (entry) => {
      const ids = this.idsFor();
      const defer = !this.shared(runId);
      for (let delay = 100; ; delay = Math.min(delay * 2, 5_000)) {
        try {
          return await this.executeNow(runId, labels, command, entry, ids, defer);
        } catch (error) {
          if (!(error instanceof BusError) || !error.retryable || error instanceof ConcurrencyError)
            throw error;
          this.options.log.warn({ runId, err: error }, "event log unreachable; will retry the append");
          await new Promise((resolve) => setTimeout(resolve, delay));
        }
      }
    });
  }

  /**
   * Another writer appended to the run recently (another gateway serves it too): its
   * outcomes go out at once rather than waiting to share a write.
   */
  shared(runId: string): boolean {
    const entry = this.runs.get(runId);
    return entry !== undefined && this.options.clock() - entry.foreignMs < SHARED_RUN_MS;
  }

  /** The run's current state, read from the log if this gateway has not seen it yet. */
  async current(runId: string): Promise<RunState> {
    const entry = this.entry(runId);
    await entry.tail;
    if (entry.stale || !entry.known) await this.catchUp(runId, entry);
    return entry.state;
  }

  /** Resolves when every append started so far has settled (for graceful shutdown). */
  async drain(): Promise<void> {
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }

  /** Runs held in memory (for health and benchmarks). */
  get cachedRuns(): number {
    return this.runs.size;
  }

  private enqueue(runId: string, work: (entry: Entry) => Promise<Executed>): Promise<Executed> {
    const entry = this.entry(runId);
    const turn = entry.tail.then(() => work(entry));
    entry.tail = turn.catch(() => undefined);
    const settled = turn.finally(() => this.pending.delete(settled));
    settled.catch(() => undefined);
    this.pending.add(settled);
    return turn;
  }

  /** Event ids for one decision's events, fixed across its retries. */
  private idsFor(): () => string {
    const ids: string[] = [];
    let next = 0;
    return () => {
      if (next === ids.length) ids.push(this.options.newId());
      return ids[next++]!;
    };
  }

  private async executeNow(
    runId: string,
    labels: RunLabels,
    command: RunCommand,
    entry: Entry,
    ids: () => string,
    defer: boolean,
  ): Promise<Executed> {
    const retries = this.options.maxConflictRetries ?? 25;
    let behind: number | undefined;
    for (let attempt = 0; ; attempt++) {
      // Writers racing on one run take turns: after a second conflict, back off a random
      // while (growing, capped) so the other side's queue drains instead of both retrying
      // in lockstep.
      if (attempt >= 2) await sleep(Math.random() * Math.min(2 ** (attempt - 2), 50));
      // Another writer got there first: what it appended is usually already on the watch.
      if (behind !== undefined && entry.known && !entry.stale) await this.watchReaches(entry, behind);
      if (behind !== undefined && entry.lastStreamSequence < behind) entry.stale = true;
      behind = undefined;
      // Only a start may assume a run it has not read is new; anything else decides on
      // the run as the log has it (a step's outcome after its run left the cache).
      if (entry.stale || (!entry.known && command.type !== "StartStep")) await this.catchUp(runId, entry);
      const at = this.options.clock();
      const events: DecodedEnvelope[] = [];
      try {
        entry.appending += 1;
        for (const payload of decide(command, entry.state, at)) {
          const envelope = makeEnvelope({
            id: ids(),
            runId,
            sequence: entry.state.lastSequence + 1,
            timestampMs: at,
            tag: labels.tag,
            tenant: labels.tenant,
            payload,
          });
          const { streamSequence } = await this.options.bus.append(envelope, entry.lastStreamSequence, {
            defer,
          });
          entry.state = evolve(entry.state, envelope);
          entry.lastStreamSequence = streamSequence;
          // The log took it at the sequence expected: the state is the log's.
          entry.known = true;
          events.push(envelope);
        }
        return { events, state: entry.state };
      } catch (error) {
        if (!(error instanceof ConcurrencyError) || attempt >= retries) throw error;
        this.options.log.debug({ runId, attempt }, "run moved on in another writer; catching up");
        behind = error.actualStreamSequence ?? Number.MAX_SAFE_INTEGER;
        if (!entry.known) entry.stale = true;
      } finally {
        entry.appending -= 1;
        this.replayHeard(entry);
      }
    }
  }

  /** Resolves once the watch has folded the run up to `streamSequence`, or after a short grace. */
  private watchReaches(entry: Entry, streamSequence: number): Promise<void> {
    if (entry.lastStreamSequence >= streamSequence) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        entry.advanced = undefined;
        resolve();
      };
      const timer = setTimeout(done, WATCH_GRACE_MS);
      entry.advanced = () => {
        if (entry.lastStreamSequence >= streamSequence || entry.stale) done();
      };
    });
  }

  /** Folds in what the log holds after the last event this gateway knew of the run. */
  private async catchUp(runId: string, entry: Entry): Promise<void> {
    entry.stale = false;
    // What the watch brings during the read waits, and is folded after it.
    entry.appending += 1;
    try {
      const missing = await this.options.bus.readRun(runId, entry.lastStreamSequence);
      for (const { envelope } of missing.events) entry.state = evolve(entry.state, envelope);
      if (missing.events.length > 0 && entry.known) entry.foreignMs = this.options.clock();
      entry.lastStreamSequence = missing.lastStreamSequence;
      entry.known = true;
    } catch (error) {
      entry.stale = true;
      throw error;
    } finally {
      entry.appending -= 1;
      this.replayHeard(entry);
    }
  }

  private heard(event: WatchedEvent): void {
    const entry = this.runs.get(event.runId);
    if (entry === undefined || event.streamSequence <= entry.lastStreamSequence) return;
    if (entry.appending > 0) entry.heard.push(event);
    else this.fold(entry, event);
  }

  private replayHeard(entry: Entry): void {
    if (entry.appending > 0 || entry.heard.length === 0) return;
    const heard = entry.heard;
    entry.heard = [];
    for (const event of heard) if (event.streamSequence > entry.lastStreamSequence) this.fold(entry, event);
  }

  /** Folds one watched event when it is the run's next; anything else means the state is behind. */
  private fold(entry: Entry, event: WatchedEvent): void {
    if (entry.stale) return;
    try {
      const envelope = decodeEnvelope(event.data);
      if (envelope.sequence !== entry.state.lastSequence + 1) {
        entry.stale = true;
      } else {
        // This process's own appends are folded when their ack arrives: whatever the
        // watch brings first is another writer's.
        entry.state = evolve(entry.state, envelope);
        entry.lastStreamSequence = event.streamSequence;
        entry.foreignMs = this.options.clock();
      }
    } catch {
      entry.stale = true;
    }
    entry.advanced?.();
  }

  private entry(runId: string): Entry {
    let entry = this.runs.get(runId);
    if (entry) {
      // Map iteration order is insertion order: re-inserting marks it most recently used.
      this.runs.delete(runId);
    } else {
      // Taken to be new until the log says otherwise (see the class comment).
      entry = {
        state: initialState(runId),
        lastStreamSequence: 0,
        tail: Promise.resolve(),
        appending: 0,
        heard: [],
        stale: false,
        known: false,
        foreignMs: 0,
        advanced: undefined,
      };
    }
    this.runs.set(runId, entry);
    this.evict();
    return entry;
  }

  private evict(): void {
    const max = this.options.maxCachedRuns ?? 10_000;
    for (const [runId, entry] of this.runs) {
      if (this.runs.size <= max) break;
      // A run with appends in flight stays; its state is needed when they land.
      if (entry.appending === 0) this.runs.delete(runId);
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
