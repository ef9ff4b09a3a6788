import { type Bus, BusError, BusUnavailableError, ConcurrencyError } from "@holdfast/bus";
import {
  type DecodedEnvelope,
  type EventPayload,
  evolve,
  foldRun,
  initialState,
  makeEnvelope,
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
  /** Attempts to re-read and re-decide after another writer got to a run first. */
  maxConflictRetries?: number;
  /** How long an append may wait behind the run's earlier appends before giving up. */
  queueTimeoutMs?: number;
}

interface Entry {
  state: RunState;
  /** Stream sequence of the run's last event: the expectation for the next append. */
  lastStreamSequence: number;
  /** Tail of this run's appends: they run one after another, in call order. */
  tail: Promise<unknown>;
}

/** Decides the payload of the next event from the run as it stands. */
export type Decide = (state: RunState) => EventPayload;
/** A decision that may be "append nothing" (e.g. the step it is about has already finished). */
export type DecideIfNeeded = (state: RunState) => EventPayload | undefined;

export interface Appended {
  event: DecodedEnvelope;
  state: RunState;
}

/**
 * The gateway's view of runs: each run's state folded from its events, kept in memory,
 * and the only way the gateway appends to a run.
 *
 * Appends to one run are serialized in this process and guarded across processes by the
 * stream's expected-last-sequence check: when another gateway appended first, the run is
 * re-read, the event re-decided, and the append retried.
 */
export class RunLedger {
  private readonly runs = new Map<string, Entry>();
  private readonly pending = new Set<Promise<unknown>>();

  constructor(private readonly options: LedgerOptions) {}

  /**
   * Appends the event `decide` makes from the run's current state, and returns the
   * envelope as appended together with the run state after it.
   *
   * An append waits for the run's earlier appends. If its turn has not come within
   * `queueTimeoutMs` (the log is down and an earlier outcome is still being retried), it
   * gives up without appending anything and rejects with BusUnavailableError.
   */
  append(runId: string, tag: string, decide: Decide): Promise<Appended> {
    return this.enqueue(runId, tag, decide).then(defined);
  }

  /**
   * Like append, but `decide` may find there is nothing to append; the event is then
   * undefined. The run is re-read from the log first: "nothing to do" must not be
   * concluded from a state this gateway cached before others appended.
   */
  appendIfNeeded(
    runId: string,
    tag: string,
    decide: DecideIfNeeded,
  ): Promise<{ event: DecodedEnvelope | undefined; state: RunState }> {
    return this.enqueue(runId, tag, decide, { reloadFirst: true });
  }

  private enqueue(
    runId: string,
    tag: string,
    decide: DecideIfNeeded,
    options: { reloadFirst?: boolean } = {},
  ): Promise<{ event: DecodedEnvelope | undefined; state: RunState }> {
    const entry = this.entry(runId);
    let gaveUp = false;
    const turn = entry.tail.then(async () => {
      if (gaveUp) throw new BusUnavailableError("gave up waiting for the run's earlier appends");
      clearTimeout(timer);
      if (options.reloadFirst) await this.reload(runId, entry);
      return this.appendNow(runId, tag, decide, entry);
    });
    entry.tail = turn.catch(() => undefined);
    this.track(turn);
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        gaveUp = true;
        reject(
          new BusUnavailableError(
            `run ${JSON.stringify(runId)}: earlier events are still waiting for the event log after ${this.queueTimeoutMs} ms`,
          ),
        );
      }, this.queueTimeoutMs);
    });
    waited.catch(() => undefined);
    return Promise.race([turn, waited]);
  }

  private get queueTimeoutMs(): number {
    return this.options.queueTimeoutMs ?? 5_000;
  }

  /**
   * Like append, but keeps retrying while the log is unreachable: for outcomes of calls
   * that already happened, which must reach the log even if NATS blinks. The event id is
   * fixed across attempts, so a retry whose predecessor landed is not written twice.
   */
  record(runId: string, tag: string, decide: Decide): Promise<Appended> {
    const entry = this.entry(runId);
    const result = entry.tail.then(async () => {
      const id = this.options.newId();
      const at = this.options.clock();
      for (let delay = 100; ; delay = Math.min(delay * 2, 5_000)) {
        try {
          return defined(await this.appendNow(runId, tag, decide, entry, id, at));
        } catch (error) {
          if (!(error instanceof BusError) || !error.retryable || error instanceof ConcurrencyError)
            throw error;
          this.options.log.warn({ runId, err: error }, "event log unreachable; will retry the append");
          await new Promise((resolve) => setTimeout(resolve, delay));
        }
      }
    });
    entry.tail = result.catch(() => undefined);
    this.track(result);
    return result;
  }

  /** The run's current state, read from the log if this gateway has not seen it yet. */
  async current(runId: string): Promise<RunState> {
    const entry = this.entry(runId);
    await entry.tail;
    if (entry.lastStreamSequence === 0 && entry.state.lastSequence === 0) await this.reload(runId, entry);
    return entry.state;
  }

  /** Resolves when every append started so far has settled (for graceful shutdown). */
  async drain(): Promise<void> {
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }

  private entry(runId: string): Entry {
    let entry = this.runs.get(runId);
    if (entry) {
      // Map iteration order is insertion order: re-inserting marks it most recently used.
      this.runs.delete(runId);
    } else {
      entry = { state: initialState(runId), lastStreamSequence: 0, tail: Promise.resolve() };
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
      if (entry.state.inFlight === 0) this.runs.delete(runId);
    }
  }

  private async appendNow(
    runId: string,
    tag: string,
    decide: DecideIfNeeded,
    entry: Entry,
    id = this.options.newId(),
    at?: number,
  ): Promise<{ event: DecodedEnvelope | undefined; state: RunState }> {
    const { bus, clock } = this.options;
    const retries = this.options.maxConflictRetries ?? 5;
    for (let attempt = 0; ; attempt++) {
      const payload = decide(entry.state);
      if (payload === undefined) return { event: undefined, state: entry.state };
      const envelope = makeEnvelope({
        id,
        runId,
        sequence: entry.state.lastSequence + 1,
        timestampMs: at ?? clock(),
        tag,
        payload,
      }) as DecodedEnvelope;
      try {
        const { streamSequence } = await bus.append(envelope, entry.lastStreamSequence);
        entry.state = evolve(entry.state, envelope);
        entry.lastStreamSequence = streamSequence;
        return { event: envelope, state: entry.state };
      } catch (error) {
        if (!(error instanceof ConcurrencyError) || attempt >= retries) throw error;
        this.options.log.debug({ runId, attempt }, "run moved on in another writer; re-reading");
        await this.reload(runId, entry);
      }
    }
  }

  private async reload(runId: string, entry: Entry): Promise<void> {
    const history = await this.options.bus.readRun(runId);
    entry.state = foldRun(
      runId,
      history.events.map((e) => e.envelope),
    );
    entry.lastStreamSequence = history.lastStreamSequence;
  }

  private track(promise: Promise<unknown>): void {
    const settled = promise.finally(() => this.pending.delete(settled));
    settled.catch(() => undefined);
    this.pending.add(settled);
  }
}

function defined(result: { event: DecodedEnvelope | undefined; state: RunState }): Appended {
  if (result.event === undefined) throw new Error("a total decision appended nothing");
  return { event: result.event, state: result.state };
}
