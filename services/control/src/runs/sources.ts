import type { RunRow } from "@holdfast/analytics";
import type { Bus } from "@holdfast/bus";
import { isKnown, type RunLog, type StoredEnvelope } from "@holdfast/events";
import type { RateLimitObserved } from "@holdfast/proto";
import { CONTROL_TYPES } from "@holdfast/runs";
import { AnalyticsUnavailableError, InvalidArgumentError } from "../errors.js";

/** A run as the projection has it (`GET /v1/runs` of the projector; `holdfast ls`). */
export type ProjectedRun = RunRow;

/**
 * The projector's analytics API: the only reader of an embedded ClickHouse from another
 * process. Its runs trail the log by up to projector.linger_ms.
 */
export class Projection {
  constructor(
    private readonly url: string,
    /** A control token (read-only or not), for an analytics API that needs one. */
    private readonly token: string | undefined,
    private readonly timeoutMs = 10_000,
  ) {}

  async runs(options: { status?: string | undefined; limit: number }): Promise<ProjectedRun[]> {
    const query = new URLSearchParams({ limit: String(options.limit) });
    if (options.status !== undefined) query.set("status", options.status);
    const target = `${this.url}/v1/runs?${query}`;
    let response: Response;
    try {
      response = await fetch(target, {
        headers: this.token === undefined ? {} : { authorization: `Bearer ${this.token}` },
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (error) {
      throw new AnalyticsUnavailableError(
        `cannot reach the projector at ${this.url}: ${(error as Error).message}`,
        { cause: error },
      );
    }
    const body = (await response.json().catch(() => ({}))) as {
      runs?: ProjectedRun[];
      error?: { message?: string };
    };
    if (response.status === 400) throw new InvalidArgumentError(body.error?.message ?? "bad run listing");
    if (!response.ok || body.runs === undefined) {
      throw new AnalyticsUnavailableError(
        `the projector answered ${response.status}: ${body.error?.message ?? "no runs"}`,
      );
    }
    return body.runs;
  }
}

/** A run's events from its first, in order, and the stream sequence of its last. */
export interface RunHistory {
  events: StoredEnvelope[];
  lastStreamSequence: number;
}

/** What the log itself says of the fleet's runs, read directly from the stream. */
export class LogRuns {
  constructor(private readonly bus: Bus) {}

  /** A run's events in order, and those the read set aside (none of either for a run that never was). */
  history(runId: string): Promise<RunLog> {
    return this.bus.readRun(runId);
  }

  /**
   * Every run that has started a call, from the stream's per-subject counts (no event is
   * read): exact, but proportional to the number of runs ever seen. Used when no projector
   * is configured.
   */
  async started(): Promise<string[]> {
    return [...(await this.bus.countsByRun("StepStarted")).keys()];
  }

  /** Each provider key's last rate-limit reading, from its own subject. */
  async keyReadings(): Promise<{ observedAtMs: number; reading: RateLimitObserved }[]> {
    const readings: { observedAtMs: number; reading: RateLimitObserved }[] = [];
    for (const { envelope } of await this.bus.lastOnSubjects([
      this.bus.subjects.ofKeyType("RateLimitObserved"),
    ])) {
      if (isKnown(envelope) && envelope.payload.$case === "rateLimitObserved") {
        readings.push({ observedAtMs: envelope.timestampMs, reading: envelope.payload.value });
      }
    }
    return readings;
  }

  /**
   * The whole history of each of `runIds` that a batched read can vouch for, in a few
   * requests however many runs there are: the last event on each of the runs' subjects
   * (one short-lived consumer per READ_CHUNK runs), which is the run's whole history when
   * each kind of event it has happened once (a run held at its first call). Only a run
   * whose events so read are numbered 1..n without a gap is returned; any other is for
   * the caller to read alone (Bus.readRun). What was appended after the read is found by
   * the next append's sequence check.
   */
  async histories(runIds: readonly string[]): Promise<Map<string, RunHistory>> {
    const found = new Map<string, RunHistory>();
    if (runIds.length === 0) return found;
    const events = await this.bus.lastOnSubjects(runIds.map((runId) => this.bus.subjects.run(runId)));
    for (const { envelope, streamSequence } of events) {
      let history = found.get(envelope.runId);
      if (history === undefined) {
        history = { events: [], lastStreamSequence: 0 };
        found.set(envelope.runId, history);
      }
      history.events.push(envelope);
      history.lastStreamSequence = Math.max(history.lastStreamSequence, streamSequence);
    }
    for (const [runId, history] of found) {
      history.events.sort((a, b) => a.sequence - b.sequence);
      if (!history.events.every((envelope, i) => envelope.sequence === i + 1)) found.delete(runId);
    }
    return found;
  }

  /** Runs whose last hold, stop, trip or resume left them held or stopped: exact, from the log. */
  async heldOrStopped(): Promise<string[]> {
    const last = new Map<string, { seq: number; envelope: StoredEnvelope }>();
    const filters = CONTROL_TYPES.map((type) => this.bus.subjects.ofType(type));
    for (const { envelope, streamSequence } of await this.bus.lastOnSubjects(filters)) {
      const known = last.get(envelope.runId);
      if (known === undefined || known.seq < streamSequence) {
        last.set(envelope.runId, { seq: streamSequence, envelope });
      }
    }
    const held: string[] = [];
    for (const [runId, { envelope }] of last) {
      if (runId === "" || !isKnown(envelope)) continue;
      const $case = envelope.payload.$case;
      if ($case !== "runResumed" && $case !== "checkpointCleared") held.push(runId);
    }
    return held;
  }
}
