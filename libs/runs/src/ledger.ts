import { type Bus, BusError, ConcurrencyError, type WatchedEvent } from "@holdfast/bus";
import {
  type DecodedEnvelope,
  type EventPayload,
  type EventType,
  makeEnvelope,
  outOfSequence,
  type StoredEnvelope,
} from "@holdfast/events";
import type { Logger } from "@holdfast/log";

/** An event-sourced aggregate: its state is a fold of its events, its commands decide new ones. */
export interface Aggregate<State, Command> {
  initial(id: string): State;
  evolve(state: State, event: StoredEnvelope): State;
  /** Pure: the events the command appends on this state (none when it is already done). */
  decide(command: Command, state: State, nowMs: number): EventPayload[];
  lastSequence(state: State): number;
}

export interface LedgerOptions<State, Command> {
  aggregate: Aggregate<State, Command>;
  bus: Bus;
  log: Logger;
  clock: () => number;
  newId: () => string;
  /** Aggregates kept in memory; beyond it the least recently used are dropped and re-read on demand. */
  maxCached?: number;
  /** Attempts to catch up and re-decide after another writer got to an aggregate first (default 25). */
  maxConflictRetries?: number;
  /**
   * Hears one aggregate's events the moment they are stored, until the returned function
   * is called (Bus.tail): for an aggregate another process writes too, whose next command
   * here would otherwise meet a conflict each time the other writer has gone.
   */
  tail?: (id: string, handler: (event: WatchedEvent) => void) => () => void;
}

/** Who an aggregate's events are labelled with. */
export interface RunLabels {
  tag: string;
  tenant: string;
}

export interface Executed<State> {
  /** The events the command appended (none when it had already been carried out). */
  events: DecodedEnvelope[];
  state: State;
}

interface Entry<State> {
  readonly id: string;
  state: State;
  /** Stream sequence of the last event as this process knows it: the next append's expectation. */
  lastStreamSequence: number;
  /** Tail of the appends: they run one after another, in call order. */
  tail: Promise<unknown>;
  /** Commands queued or running on this aggregate. */
  queued: number;
  /** Appends of this process in flight; what the watch brings meanwhile waits in `heard`. */
  appending: number;
  heard: WatchedEvent[];
  /** The state may be behind the log (a gap in what the watch delivered): catch up before deciding. */
  stale: boolean;
  /** The state was read from (or confirmed by) the log, not just assumed new. */
  known: boolean;
  /** When another writer's event was last folded in (0: never): the aggregate is shared. */
  foreignMs: number;
  /** Stops hearing the aggregate's events as they are stored (set while it is shared). */
  untail: (() => void) | undefined;
  /**
   * When a command last had to queue behind this aggregate's own appends (0: never): its
   * callers come back quickly (an agent's next call of its run), so a deferred append
   * would only make them wait.
   */
  busyMs: number;
  /** Whoever waits for the state to change (a parked call): called after every change. */
  listeners: Set<(state: State) => void>;
}

// An aggregate another process wrote to this recently gets its deferrable events appended
// at once: deferred, they would only lose the race with that process's next append.
const SHARED_MS = 60_000;

/**
 * A process's view of the aggregates it serves (runs, or the fleet) and the only way it
 * appends to one.
 *
 * Each aggregate it serves is kept in memory and follows the log: the process's watches
 * (`LogFollower`) fold in what other processes append (a hold or a resume as it is stored;
 * other gateways' calls while another gateway is alive), so a decision is made from
 * current state without reading the aggregate first. What the watches do not bring is
 * found by the next append's expected-sequence check, and read then. One first seen here
 * is taken to be new; if it is not, its first append fails that check and it is read.
 * After a conflict the ledger reads the aggregate from the last event it knew, never from
 * the start.
 *
 * Appends to one aggregate are serialized in this process and guarded across processes by
 * the expected-last-subject-sequence check.
 */
export class Ledger<State, Command> {
  private readonly entries = new Map<string, Entry<State>>();
  private readonly pending = new Set<Promise<unknown>>();

  constructor(private readonly options: LedgerOptions<State, Command>) {}

  /**
   * The events `command` would append if it were executed now, decided on the state this
   * process follows, without appending anything: undefined unless that state is the log's
   * as last confirmed, no command of this process is in flight on the aggregate, and the
   * decider accepts the command. A forecast only: another process's event can still land
   * first, and the append that follows (execute) is what the log decides.
   */
  foresee(id: string, command: Command): EventPayload[] | undefined {
    const entry = this.entries.get(id);
    if (entry === undefined || !entry.known || entry.stale || entry.queued > 0 || entry.appending > 0) {
      return undefined;
    }
    try {
      return this.options.aggregate.decide(command, entry.state, this.options.clock());
    } catch {
      return undefined;
    }
  }

  /**
   * Decides `command` on the aggregate as it stands and appends what it decides, once the
   * log has acknowledged it. Rejects with a BusError when the log cannot take it, or with
   * the decider's own error when the command is refused.
   */
  execute(id: string, labels: RunLabels, command: Command): Promise<Executed<State>> {
    // A deferrable append of this aggregate may be waiting to share a write (see
    // executeDurably): this command queues behind it, so it must not wait the deferral out.
    // Another aggregate's deferred appends go out with this command's own append, in the
    // same socket write.
    const entry = this.entries.get(id);
    if (entry !== undefined && entry.queued > 0) {
      entry.busyMs = this.options.clock();
      this.options.bus.flushDeferred();
    }
    return this.enqueue(id, (entry) => this.executeNow(id, labels, command, entry, this.idsFor(), false));
  }

  /**
   * Like execute, but keeps retrying while the log is unreachable or other writers keep
   * winning the race for the aggregate: for facts that already
   * happened (a call's outcome), which must reach the log even if NATS blinks. An append
   * that had in fact landed is not written twice: the retry fails the sequence check, is
   * recognised as our own (Bus.append) or reads the run, and the decider, idempotent by
   * step, decides nothing more. Each attempt takes fresh event ids: reusing one for an
   * event decided anew could let the dedupe window swallow a different event.
   *
   * Nobody waits on these: their appends may wait a few milliseconds to share a socket
   * write with the next urgent one (Bus.append's `defer`), unless the aggregate is shared,
   * or its next command came while one was waiting (a run whose agent calls again as soon
   * as it has its answer: its next start would queue behind the deferral, and wait).
   */
  executeDurably(id: string, labels: RunLabels, command: Command): Promise<Executed<State>> {
    return this.enqueue(id, async (entry) => {
      const ids = this.idsFor();
      const defer = !this.shared(id) && this.options.clock() - entry.busyMs >= SHARED_MS;
      for (let delay = 100; ; delay = Math.min(delay * 2, 5_000)) {
        try {
          return await this.executeNow(id, labels, command, entry, ids, defer);
        } catch (error) {
          if (!(error instanceof BusError) || !error.retryable) throw error;
          if (error instanceof ConcurrencyError) {
            // Lost every race of one attempt (a cluster failing over, its replicas answering
            // reads from behind): the fact still happened, so read the log again and go on.
            entry.stale = true;
            this.options.log.warn({ id, err: error }, "the run kept moving on; will read it and retry");
          } else {
            this.options.log.warn({ id, err: error }, "event log unreachable; will retry the append");
          }
          await sleep(delay);
        }
      }
    });
  }

  /**
   * Sends every append issued so far to the log's socket now, instead of with the next
   * urgent one (deferred) or at the end of this round of I/O; their acks are not waited for.
   */
  sendAppends(): void {
    this.options.bus.flushDeferred();
  }

  /** Another process appended to the aggregate recently (another gateway serves the run too). */
  shared(id: string): boolean {
    const entry = this.entries.get(id);
    return entry !== undefined && this.options.clock() - entry.foreignMs < SHARED_MS;
  }

  /** The aggregate's current state, read from the log if this process has not seen it yet. */
  async current(id: string): Promise<State> {
    const entry = this.entry(id);
    await entry.tail;
    if (entry.stale || !entry.known) await this.catchUp(id, entry);
    return entry.state;
  }

  /**
   * The aggregate as the log has it now: what this process knew of it, and whatever was
   * appended since (read from the last event it knew). For a process that does not follow
   * every event (an operator's command, answered with the run as it stands).
   */
  async latest(id: string): Promise<State> {
    const entry = this.entry(id);
    await entry.tail;
    await this.catchUp(id, entry);
    return entry.state;
  }

  /**
   * Takes `events` (the aggregate's whole history, in order, from its first event, as a
   * batched read of many aggregates found it) as what the log holds of it up to stream
   * sequence `lastStreamSequence`, so a command decided next appends without reading the
   * aggregate first: an operator acting on thousands of runs at once reads them in a few
   * requests instead of one each. The next append's expected-sequence check still has the
   * last word: if the log moved on meanwhile, it fails, and the aggregate is read then.
   * Ignored (false) unless the events are the aggregate's first ones without a gap (one at
   * least), and while a command of this process is queued on it or it already knows more.
   */
  adopt(id: string, events: readonly StoredEnvelope[], lastStreamSequence: number): boolean {
    const { aggregate } = this.options;
    const known = this.entries.get(id);
    if (known !== undefined && (known.queued > 0 || known.appending > 0)) return false;
    if (events.length === 0 || (known?.known && known.lastStreamSequence >= lastStreamSequence)) return false;
    let state = aggregate.initial(id);
    for (const envelope of events) {
      if (envelope.sequence !== aggregate.lastSequence(state) + 1) return false;
      state = aggregate.evolve(state, envelope);
    }
    const entry = this.entry(id);
    entry.state = state;
    entry.lastStreamSequence = lastStreamSequence;
    entry.known = true;
    entry.stale = false;
    this.changed(entry);
    return true;
  }

  /**
   * Takes every aggregate held here to be behind the log: each is read from the last event
   * it knew before it is next decided on or handed out. For when the process starts or
   * stops following every event: what another writer appended just before may have
   * reached neither watch.
   */
  suspectAll(): void {
    for (const entry of this.entries.values()) if (entry.known) entry.stale = true;
  }

  /**
   * The state as this process holds it now, without reading the log: undefined unless it
   * was read from (or confirmed by) the log and is being followed.
   */
  cached(id: string): State | undefined {
    const entry = this.entries.get(id);
    return entry?.known && !entry.stale ? entry.state : undefined;
  }

  /**
   * Calls `listener` with the aggregate's state after every change, until the returned
   * function is called; the aggregate stays cached meanwhile.
   */
  subscribe(id: string, listener: (state: State) => void): () => void {
    const entry = this.entry(id);
    entry.listeners.add(listener);
    return () => entry.listeners.delete(listener);
  }

  /** Resolves when every append started so far has settled (for graceful shutdown). */
  async drain(): Promise<void> {
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }

  /** Aggregates held in memory (for health and benchmarks). */
  get cachedCount(): number {
    return this.entries.size;
  }

  /** An event from the watch; the follower calls this for every event of the stream. */
  heard(event: WatchedEvent): void {
    const entry = this.entries.get(event.runId);
    if (entry === undefined || event.streamSequence <= entry.lastStreamSequence) return;
    if (entry.appending > 0) entry.heard.push(event);
    else this.fold(entry, event);
  }

  private enqueue(
    id: string,
    work: (entry: Entry<State>) => Promise<Executed<State>>,
  ): Promise<Executed<State>> {
    const entry = this.entry(id);
    if (entry.untail !== undefined && this.options.clock() - entry.foreignMs >= SHARED_MS) {
      entry.untail();
      entry.untail = undefined;
    }
    entry.queued += 1;
    const turn = entry.tail
      .then(() => work(entry))
      .finally(() => {
        entry.queued -= 1;
      });
    entry.tail = turn.catch(() => undefined);
    const settled = turn.finally(() => this.pending.delete(settled));
    settled.catch(() => undefined);
    this.pending.add(settled);
    return turn;
  }

  /** Event ids for one command's events, one new id per event appended or attempted. */
  private idsFor(): () => string {
    const ids: string[] = [];
    let next = 0;
    return () => {
      if (next === ids.length) ids.push(this.options.newId());
      return ids[next++]!;
    };
  }

  private async executeNow(
    id: string,
    labels: RunLabels,
    command: Command,
    entry: Entry<State>,
    ids: () => string,
    defer: boolean,
  ): Promise<Executed<State>> {
    const { aggregate, bus, clock } = this.options;
    const retries = this.options.maxConflictRetries ?? 25;
    let behind: number | undefined;
    // Whether this command has decided on the aggregate as read from the log (not only as
    // the watch brought it): a refusal is only given on that.
    let read = false;
    for (let attempt = 0; ; attempt++) {
      // Writers racing on one aggregate take turns: after a second conflict, back off a
      // random while (growing, capped) so the other side's queue drains instead of both
      // retrying in lockstep.
      if (attempt >= 2) await sleep(Math.random() * Math.min(2 ** (attempt - 2), 50));
      // Another writer got there first: read what it appended (from the last event this
      // process knew), unless the watch has brought it meanwhile. Waiting for the watch
      // instead would cost up to its linger, longer than the read.
      if (behind !== undefined && entry.lastStreamSequence < behind) entry.stale = true;
      behind = undefined;
      // Only a command whose decision reads nothing of the past may assume an aggregate it
      // has not read is new (a first start); the first append's sequence check then says
      // whether it is. Anything else decides on the aggregate as the log has it.
      if (entry.stale || (!entry.known && !assumesNew(command))) {
        await this.catchUp(id, entry);
        read = true;
      }
      const at = clock();
      const events: DecodedEnvelope[] = [];
      try {
        entry.appending += 1;
        for (const payload of aggregate.decide(command, entry.state, at)) {
          const envelope = makeEnvelope({
            id: ids(),
            runId: id,
            sequence: aggregate.lastSequence(entry.state) + 1,
            timestampMs: at,
            tag: labels.tag,
            tenant: labels.tenant,
            payload,
          });
          const { streamSequence } = await bus.append(envelope, entry.lastStreamSequence, { defer });
          entry.state = aggregate.evolve(entry.state, envelope);
          entry.lastStreamSequence = streamSequence;
          // The log took it at the sequence expected: the state is the log's.
          entry.known = true;
          events.push(envelope);
        }
        if (events.length > 0) this.changed(entry);
        return { events, state: entry.state };
      } catch (error) {
        // The decider refused the command on the state this process follows: an event
        // another process appended (a resume) may not have reached its watch yet. Read the
        // log, and decide once more on what it says.
        if (!(error instanceof BusError) && events.length === 0 && !read) {
          entry.stale = true;
          continue;
        }
        // An append whose outcome is unknown (its ack lost, the log unreachable) may have
        // landed: the state here is read from the log before it is decided on again.
        if (error instanceof BusError && !(error instanceof ConcurrencyError)) entry.stale = true;
        if (!(error instanceof ConcurrencyError) || attempt >= retries) throw error;
        this.options.log.debug({ id, attempt }, "aggregate moved on in another writer; catching up");
        behind = error.actualStreamSequence ?? Number.MAX_SAFE_INTEGER;
        if (!entry.known) entry.stale = true;
      } finally {
        entry.appending -= 1;
        this.replayHeard(entry);
      }
    }
  }

  /**
   * Folds in what the log holds after the last event this process knew of the aggregate.
   * Read from the log itself, an event past the aggregate's next sequence is no gap in a
   * feed but in the log: quarantined, not folded, and the aggregate's next event still
   * is. What the read could not decode it set aside already (the bus quarantines it); its
   * place still counts for the next append's expected sequence.
   */
  private async catchUp(id: string, entry: Entry<State>): Promise<void> {
    entry.stale = false;
    // What the watch brings during the read waits, and is folded after it.
    entry.appending += 1;
    try {
      const { aggregate, bus } = this.options;
      const missing = await bus.readRun(id, entry.lastStreamSequence);
      for (const { envelope, streamSequence } of missing.events) {
        const last = aggregate.lastSequence(entry.state);
        if (envelope.sequence > last + 1) {
          const subject = bus.subjects.runEvent(id, envelope.type as EventType);
          bus.quarantined(outOfSequence(envelope, { streamSequence, subject }, last));
          continue;
        }
        entry.state = aggregate.evolve(entry.state, envelope);
      }
      // Events this process did not append: another writer's. Read at first sight, they
      // mean the same when the last is recent (another gateway serves the run now); older
      // ones are a run taken up again.
      const last = missing.events.at(-1);
      if (
        last !== undefined &&
        (entry.known || this.options.clock() - last.envelope.timestampMs < SHARED_MS)
      ) {
        this.foreign(entry);
      }
      entry.lastStreamSequence = missing.lastStreamSequence;
      entry.known = true;
      if (missing.events.length > 0) this.changed(entry);
    } catch (error) {
      entry.stale = true;
      throw error;
    } finally {
      entry.appending -= 1;
      this.replayHeard(entry);
    }
  }

  private replayHeard(entry: Entry<State>): void {
    if (entry.appending > 0 || entry.heard.length === 0) return;
    const heard = entry.heard;
    entry.heard = [];
    for (const event of heard) if (event.streamSequence > entry.lastStreamSequence) this.fold(entry, event);
  }

  /**
   * Folds one watched event when it is the aggregate's next; anything else means the state
   * is behind (a watch may bring only some of the aggregate's events), and the aggregate is
   * read from the log before it is next decided on. One the bus quarantined is no event of
   * the aggregate: the read passes over it too.
   */
  private fold(entry: Entry<State>, event: WatchedEvent): void {
    if (!entry.stale) {
      const envelope = this.options.bus.decode(event);
      if (
        envelope === undefined ||
        envelope.sequence !== this.options.aggregate.lastSequence(entry.state) + 1
      ) {
        entry.stale = true;
      } else {
        // This process's own appends are folded when their ack arrives: whatever the
        // watch brings first is another writer's.
        entry.state = this.options.aggregate.evolve(entry.state, envelope);
        entry.lastStreamSequence = event.streamSequence;
        this.foreign(entry);
        this.changed(entry);
      }
    }
    // A listener waiting on a state the watch could not follow reads the log itself.
    if (entry.stale && entry.listeners.size > 0 && entry.appending === 0) {
      void this.current(entry.id).catch((error: unknown) =>
        this.options.log.warn({ id: entry.id, err: error }, "could not catch up a watched aggregate"),
      );
    }
  }

  /**
   * Another writer's event was folded in: the aggregate is shared, and is heard as its
   * events are stored while it stays so (a run two gateways serve in turn finds the other
   * one's calls already folded instead of meeting a conflict at each of its own).
   */
  private foreign(entry: Entry<State>): void {
    entry.foreignMs = this.options.clock();
    if (entry.untail !== undefined || this.options.tail === undefined) return;
    entry.untail = this.options.tail(entry.id, (event) => this.heard(event));
  }

  private changed(entry: Entry<State>): void {
    for (const listener of [...entry.listeners]) {
      try {
        listener(entry.state);
      } catch (error) {
        this.options.log.error({ err: error }, "a ledger listener failed");
      }
    }
  }

  private entry(id: string): Entry<State> {
    let entry = this.entries.get(id);
    if (entry) {
      // Map iteration order is insertion order: re-inserting marks it most recently used.
      this.entries.delete(id);
    } else {
      // Taken to be new until the log says otherwise (see the class comment).
      entry = {
        id,
        state: this.options.aggregate.initial(id),
        lastStreamSequence: 0,
        tail: Promise.resolve(),
        queued: 0,
        appending: 0,
        heard: [],
        stale: false,
        known: false,
        foreignMs: 0,
        untail: undefined,
        busyMs: 0,
        listeners: new Set(),
      };
    }
    this.entries.set(id, entry);
    this.evict();
    return entry;
  }

  private evict(): void {
    const max = this.options.maxCached ?? 10_000;
    for (const [id, entry] of this.entries) {
      if (this.entries.size <= max) break;
      // One with commands queued or running, or listeners waiting, stays: it is needed (a
      // second entry for the same aggregate would not queue behind the first's appends).
      if (entry.queued === 0 && entry.appending === 0 && entry.listeners.size === 0) {
        entry.untail?.();
        this.entries.delete(id);
      }
    }
  }
}

/** Commands that may be decided on an aggregate assumed new (their first append checks it). */
function assumesNew(command: unknown): boolean {
  const type = (command as { type?: string }).type;
  // A call's start, and a durable run's submission (a run id made for it, or an
  // idempotency key's: if the run exists, the first append says so and it is read).
  return type === "StartStep" || type === "SubmitRun";
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
