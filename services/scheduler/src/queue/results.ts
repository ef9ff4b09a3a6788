import { type DurableState, isKnown, type StoredEnvelope } from "@holdfast/events";
import type { RecordedStep } from "@holdfast/proto";

interface RunResults {
  readonly epoch: number;
  /** Failed attempts recorded (the run's count): a cache that missed one is read again. */
  failedAttempts: number;
  readonly steps: Map<string, RecordedStep>;
  /** Attempts a step that has not succeeded yet took, by "label#ordinal". */
  readonly attempts: Map<string, number>;
}

// Runs whose recorded steps are kept in memory beyond their running (a failed run's, for
// a quick re-drive); the rest are read from the log when they are next leased.
const KEPT = 1_000;

/**
 * The recorded results of durable runs' steps, handed to the worker that runs a run so
 * it reuses them instead of running the steps again: kept from the steps this scheduler
 * recorded, else read from the run's events in the log (the current epoch's: a replay
 * starts a new one, reusing nothing).
 */
export class StepResults {
  private readonly runs = new Map<string, RunResults>();

  constructor(private readonly readRun: (runId: string) => Promise<StoredEnvelope[]>) {}

  async of(
    runId: string,
    durable: DurableState,
  ): Promise<{ steps: RecordedStep[]; attempts: { [key: string]: number } }> {
    let results = this.runs.get(runId);
    if (results === undefined && durable.stepsOk === 0 && durable.failedAttempts === 0) {
      // Nothing recorded yet (a run's first lease): nothing to read.
      results = { epoch: durable.epoch, failedAttempts: 0, steps: new Map(), attempts: new Map() };
      this.keep(runId, results);
    }
    if (
      results === undefined ||
      results.epoch !== durable.epoch ||
      results.steps.size !== durable.stepsOk ||
      results.failedAttempts !== durable.failedAttempts
    ) {
      results = fromEvents(await this.readRun(runId));
      this.keep(runId, results);
    }
    return { steps: [...results.steps.values()], attempts: Object.fromEntries(results.attempts) };
  }

  recorded(runId: string, label: string, ordinal: number, resultJson: string): void {
    const results = this.runs.get(runId);
    if (results === undefined) return;
    const key = `${label}#${ordinal}`;
    results.steps.set(key, { label, ordinal, resultJson });
    results.attempts.delete(key);
  }

  attempted(runId: string, label: string, ordinal: number, attempt: number): void {
    const results = this.runs.get(runId);
    if (results === undefined) return;
    results.attempts.set(`${label}#${ordinal}`, attempt);
    results.failedAttempts += 1;
  }

  forget(runId: string): void {
    this.runs.delete(runId);
  }

  private keep(runId: string, results: RunResults): void {
    this.runs.delete(runId);
    this.runs.set(runId, results);
    if (this.runs.size > KEPT) this.runs.delete(this.runs.keys().next().value!);
  }
}

/**
 * The current epoch's recorded steps, from the run's events (its whole history, in
 * order). As the run's fold does, it takes only each next event: a recorded step whose
 * sequence is not the run's next (past a gap in the log) is no step of the run, and is
 * never handed to a worker to reuse.
 */
export function fromEvents(events: readonly StoredEnvelope[]): RunResults {
  let results: RunResults = { epoch: 0, failedAttempts: 0, steps: new Map(), attempts: new Map() };
  let lastSequence = 0;
  for (const event of events) {
    if (event.sequence !== lastSequence + 1) continue;
    lastSequence = event.sequence;
    if (!isKnown(event)) continue;
    const payload = event.payload;
    if (payload.$case === "runRedriven" && payload.value.replay) {
      results = {
        epoch: results.epoch + 1,
        failedAttempts: results.failedAttempts,
        steps: new Map(),
        attempts: new Map(),
      };
    } else if (payload.$case === "stepRecorded") {
      const e = payload.value;
      const key = `${e.label}#${e.ordinal}`;
      if (e.ok) {
        if (!results.steps.has(key))
          results.steps.set(key, { label: e.label, ordinal: e.ordinal, resultJson: e.resultJson });
        results.attempts.delete(key);
      } else {
        results.failedAttempts += 1;
        if (!results.steps.has(key))
          results.attempts.set(key, Math.max(results.attempts.get(key) ?? 0, e.attempt));
      }
    }
  }
  return results;
}
