import {
  type Actor,
  type DecodedEnvelope,
  DurablePhase,
  DurableRunError,
  type RunState,
  RunStatus,
} from "@holdfast/events";
import { ReleaseReason, type RunDone, RunFailure, type StepReport } from "@holdfast/proto";
import { NextSteps, pick as pickRun } from "./handout.js";
import { Leases } from "./lease.js";
import { LettingGo } from "./letgo.js";
import { StepResults } from "./results.js";
import {
  type Core,
  capKeyOf,
  failure,
  type Leasing,
  labelsOf,
  MAX_REPORT_BYTES,
  ORPHANED,
  type Queued,
  queuedOf,
  type Running,
  SCHEDULER,
  type SchedulerOptions,
  type Worker,
  type WorkerLink,
} from "./state.js";

export { ceilingOf, type SchedulerOptions, type WorkerLink } from "./state.js";

/**
 * Hands durable runs to workers and keeps the log's account of them: leases, steps,
 * releases, ends. Every change is decided by the run's decider and appended through the
 * ledger, and a step is acknowledged only once it is recorded, so the log is the truth and
 * this process rebuilds from it. A worker is sent a run as its lease is appended (see
 * Leases.leaseNow in lease.ts): nothing it reports can land before the lease, and it is
 * told to let go if the lease does not land.
 *
 * A run is handed out in queue order (runs that were running before go first), to a
 * worker serving its agent at its version, when its caps allow (per tenant, agent and
 * partition key) and its provider key's window fits its next step as the log last read
 * it. A worker's connection closing releases its runs at once; a worker that stops
 * beating loses them when their lease expires. A run past its ceiling of running time,
 * held, or cancelled is let go here first (recorded), and its worker told after.
 */
export class Scheduler {
  private readonly workers = new Map<string, Worker>();
  private readonly queued = new Map<string, Queued>();
  /** Runs queued again after running (released, resumed): they go before fresh ones. */
  private readonly again = new Map<string, Queued>();
  private readonly running = new Map<string, Running>();
  /** Runs whose lease is being recorded: a hold or stop heard meanwhile is acted on once it is. */
  private readonly leasing = new Map<string, Leasing>();
  private readonly results: StepResults;
  private readonly nextSteps: NextSteps;
  private readonly core: Core;
  private readonly leases: Leases;
  private readonly lettingGo: LettingGo;
  private dispatchPending = false;
  private wakeAt: { atMs: number; timer: NodeJS.Timeout } | undefined;
  private readonly sweeper: NodeJS.Timeout;
  private closed = false;

  constructor(private readonly options: SchedulerOptions) {
    this.results = new StepResults(options.readRun);
    this.nextSteps = new NextSteps(options.windows);
    this.core = {
      options,
      workers: this.workers,
      queued: this.queued,
      again: this.again,
      running: this.running,
      leasing: this.leasing,
      results: this.results,
      dispatch: () => this.dispatch(),
      enqueue: (runId, state) => this.enqueue(runId, state),
      controlled: (runId) => this.controlled(runId),
      found: (runId) => this.found(runId),
      execute: (queued, command) =>
        options.ledger.execute(queued.runId, { tag: queued.tag, tenant: queued.tenant }, command),
    };
    this.lettingGo = new LettingGo(this.core);
    this.leases = new Leases(this.core, this.lettingGo);
    this.sweeper = setInterval(
      () => this.lettingGo.expire(),
      Math.max(100, Math.min(1_000, options.leaseMs / 10)),
    );
    this.sweeper.unref();
  }

  // ---- What the log says ----

  /** A durable run found queued (at start, or just submitted): it waits for a worker. */
  enqueue(runId: string, state: RunState): void {
    const durable = state.durable;
    if (durable === null || durable.phase !== DurablePhase.Queued || this.running.has(runId)) return;
    const entry = queuedOf(runId, state, durable);
    (durable.leases > 0 ? this.again : this.queued).set(runId, entry);
    this.dispatch();
  }

  /** A run found running at start: its worker has `leaseMs` to say it still runs it, or it is released. */
  adoptOrphan(runId: string, state: RunState): void {
    const durable = state.durable;
    if (durable === null || durable.phase !== DurablePhase.Running) return;
    const orphan: Running = {
      queued: queuedOf(runId, state, durable),
      lease: durable.lease,
      worker: ORPHANED,
      leasedAtMs: durable.leasedAtMs,
      ranBeforeMs: durable.ranMs,
      // Its worker's lease runs from when workers can reach this scheduler (armOrphans).
      expiresAtMs: Number.POSITIVE_INFINITY,
      waitedMs: 0,
      ceiling: undefined,
      untail: () => undefined,
      releasing: false,
      handedOver: true,
    };
    this.running.set(runId, orphan);
    this.lettingGo.armCeiling(orphan);
    this.options.caps.started(capKeyOf(orphan.queued), false, this.options.clock());
  }

  /** Workers can reach this scheduler now: the runs found running at start have a lease's time to be claimed. */
  armOrphans(): void {
    const expiresAtMs = this.options.clock() + this.options.leaseMs;
    for (const running of this.running.values())
      if (running.worker === ORPHANED) running.expiresAtMs = expiresAtMs;
  }

  /**
   * Another process changed a run this scheduler knows (an operator's hold, resume or
   * stop, a rate-limit checkpoint): a held run lets go of its worker; a resumed one is
   * queued again; a stopped one fails as cancelled.
   */
  async controlled(runId: string): Promise<void> {
    const leasing = this.leasing.get(runId);
    if (leasing !== undefined) {
      leasing.recheck = true;
      return;
    }
    const queued = this.queued.get(runId) ?? this.again.get(runId);
    const running = this.running.get(runId);
    if (queued === undefined && running === undefined) return;
    const state = await this.options.ledger.latest(runId);
    const held = state.status === RunStatus.Held;
    const stopped = state.status === RunStatus.Stopped;
    if (stopped) {
      await this.cancel(runId, SCHEDULER, "the run was stopped");
      return;
    }
    if (queued !== undefined) {
      queued.held = held;
      if (!held) this.dispatch();
      return;
    }
    if (held && running !== undefined)
      await this.lettingGo.letGo(running, ReleaseReason.RELEASE_REASON_HELD, "held");
  }

  /** One of a running run's own events, heard as it was stored (its model calls). */
  heard(runId: string, envelope: DecodedEnvelope): void {
    if (envelope.payload.$case !== "stepStarted") return;
    const prediction = envelope.payload.value.prediction;
    const running = this.running.get(runId);
    if (prediction === undefined) return;
    // What the agent's next step is likely to cost, on which key: the window it waits for.
    if (running !== undefined) this.nextSteps.heard(running.queued.agent, prediction);
    // Time a call waited for its window in the gateway does not count against the ceiling.
    if (running !== undefined && prediction.waitedMs > 0) {
      running.waitedMs += Number(prediction.waitedMs);
      this.lettingGo.armCeiling(running);
    }
  }

  // ---- Workers ----

  /** A worker's session began: it may pick up runs it was running, then takes new ones. */
  joined(link: WorkerLink, leases: readonly { runId: string; lease: number }[]): void {
    const worker: Worker = { link, busy: new Set() };
    this.workers.set(link.id, worker);
    for (const { runId, lease } of leases) {
      const running = this.running.get(runId);
      // Its own: found running at start, or held by an earlier session of this worker (a
      // connection that died without this scheduler noticing yet).
      // Not a run whose lease is still being written (handed over early): whether that
      // lease is the run's is not known yet, and the attempt settles it.
      const claimable =
        running !== undefined &&
        running.lease === lease &&
        !running.releasing &&
        !this.leasing.has(runId) &&
        (running.worker === ORPHANED || running.worker.name === link.name);
      if (!claimable) {
        link.send({ message: { $case: "revoked", value: { runId, lease, reason: "lease_over" } } });
        continue;
      }
      if (running.worker !== ORPHANED) this.workers.get(running.worker.id)?.busy.delete(runId);
      running.untail();
      clearTimeout(running.ceiling);
      const adopted: Running = {
        ...running,
        worker: link,
        untail: this.options.tail(runId),
        expiresAtMs: this.options.clock() + this.options.leaseMs,
        ceiling: undefined,
      };
      this.running.set(runId, adopted);
      this.lettingGo.armCeiling(adopted);
      worker.busy.add(runId);
    }
    this.dispatch();
  }

  /** A worker's session ended (its connection closed): its runs are released at once. */
  async left(linkId: string): Promise<void> {
    const worker = this.workers.get(linkId);
    if (worker === undefined) return;
    this.workers.delete(linkId);
    // This scheduler is closing: its workers' leases stand, for the next one to take up.
    if (this.closed) return;
    const mine = [...this.running.values()].filter((r) => r.worker.id === linkId);
    await Promise.all(
      mine.map((running) => this.lettingGo.release(running, ReleaseReason.RELEASE_REASON_WORKER_GONE)),
    );
  }

  /** A heartbeat from the worker's beating thread (or any message of its session): its leases are renewed. */
  renew(linkId: string | undefined, runId: string, lease: number): boolean {
    const running = this.running.get(runId);
    if (running === undefined || running.lease !== lease) return false;
    if (linkId !== undefined && running.worker.id !== linkId && running.worker !== ORPHANED) return false;
    running.expiresAtMs = this.options.clock() + this.options.leaseMs;
    return true;
  }

  /** Renews by worker name (the beating thread has a connection of its own). */
  renewByName(worker: string, runId: string, lease: number): boolean {
    const running = this.running.get(runId);
    if (running === undefined || running.lease !== lease) return false;
    if (running.worker !== ORPHANED && running.worker.name !== worker) return false;
    running.expiresAtMs = this.options.clock() + this.options.leaseMs;
    return true;
  }

  /** A step of a run the worker runs, to be recorded: resolves once it is (or why it was not). */
  async step(linkId: string, report: StepReport): Promise<{ ok: boolean; fenced: boolean; error: string }> {
    const running = this.running.get(report.runId);
    if (running === undefined || running.lease !== report.lease || running.worker.id !== linkId) {
      return { ok: false, fenced: true, error: `lease ${report.lease} of ${report.runId} is over` };
    }
    running.expiresAtMs = this.options.clock() + this.options.leaseMs;
    if (Buffer.byteLength(report.resultJson) + Buffer.byteLength(report.error) > MAX_REPORT_BYTES) {
      return {
        ok: false,
        fenced: false,
        error: `a step's result may take at most ${MAX_REPORT_BYTES} bytes: keep large content elsewhere and return a reference`,
      };
    }
    try {
      await this.core.execute(running.queued, {
        type: "RecordStep",
        lease: report.lease,
        label: report.label,
        ordinal: report.ordinal,
        attempt: report.attempt,
        ok: report.ok,
        resultJson: report.resultJson,
        error: report.error,
        final: report.final,
        durationMs: report.durationMs,
      });
      if (report.ok) this.results.recorded(report.runId, report.label, report.ordinal, report.resultJson);
      else this.results.attempted(report.runId, report.label, report.ordinal, report.attempt);
      return { ok: true, fenced: false, error: "" };
    } catch (error) {
      return failure(error);
    }
  }

  /** The worker's run returned or raised. */
  async done(linkId: string, report: RunDone): Promise<{ ok: boolean; fenced: boolean; error: string }> {
    const running = this.running.get(report.runId);
    const worker = this.workers.get(linkId);
    worker?.busy.delete(report.runId);
    if (running === undefined || running.lease !== report.lease || running.worker.id !== linkId) {
      this.dispatch();
      return { ok: false, fenced: true, error: `lease ${report.lease} of ${report.runId} is over` };
    }
    const ranMs = this.lettingGo.ranMs(running);
    if (Buffer.byteLength(report.outputJson) + Buffer.byteLength(report.error) > MAX_REPORT_BYTES) {
      report = {
        ...report,
        ok: false,
        outputJson: "",
        error: `the run's output may take at most ${MAX_REPORT_BYTES} bytes: keep large content elsewhere and return a reference`,
      };
    }
    try {
      await this.core.execute(
        running.queued,
        report.ok
          ? {
              type: "FinishRun",
              lease: report.lease,
              outputJson: report.outputJson,
              degraded: report.degraded,
              ranMs,
            }
          : {
              type: "FailRun",
              lease: report.lease,
              failure: RunFailure.RUN_FAILURE_ERROR,
              error: report.error,
              ranMs,
              actor: undefined,
              label: report.label,
              ordinal: report.ordinal,
            },
      );
      this.lettingGo.ended(running);
      if (report.ok) this.results.forget(report.runId);
      return { ok: true, fenced: false, error: "" };
    } catch (error) {
      // Recorded by someone else first (a ceiling, a cancel): the run is over here too.
      if (error instanceof DurableRunError) this.lettingGo.ended(running);
      return failure(error);
    } finally {
      this.dispatch();
    }
  }

  /**
   * The worker let go of a run: told to, or refusing it (it is stopping, or does not serve
   * the run's agent after all). Its slot is free; a run it still held the lease of goes back
   * on the queue at once.
   */
  letGoDone(linkId: string, runId: string, lease: number): void {
    this.workers.get(linkId)?.busy.delete(runId);
    const running = this.running.get(runId);
    if (running !== undefined && running.lease === lease && running.worker.id === linkId) {
      void this.lettingGo.release(running, ReleaseReason.RELEASE_REASON_WORKER_GONE);
    }
    this.dispatch();
  }

  // ---- Operators ----

  /** Fails a queued, running or held run as cancelled; its worker is told to let go. */
  async cancel(runId: string, actor: Actor, reason: string): Promise<RunState> {
    const running = this.running.get(runId);
    const state = await this.options.ledger.latest(runId);
    const ranMs = running !== undefined ? this.lettingGo.ranMs(running) : (state.durable?.ranMs ?? 0);
    const done = await this.options.ledger.execute(runId, labelsOf(state), {
      type: "FailRun",
      lease: 0,
      failure: RunFailure.RUN_FAILURE_CANCELLED,
      error: reason === "" ? "cancelled" : `cancelled: ${reason}`,
      ranMs,
      actor,
      label: "",
      ordinal: 0,
    });
    this.queued.delete(runId);
    this.again.delete(runId);
    // As it runs now: it may have been leased while the cancel was recorded.
    const cancelled = this.running.get(runId);
    if (cancelled !== undefined) {
      this.lettingGo.ended(cancelled);
      this.lettingGo.revoke(cancelled, "cancelled");
    }
    return done.state;
  }

  /** Queues a failed (or, replaying, finished) run again. */
  async redrive(
    runId: string,
    actor: Actor,
    reason: string,
    replay: boolean,
    version: string,
  ): Promise<RunState> {
    const state = await this.options.ledger.latest(runId);
    const done = await this.options.ledger.execute(runId, labelsOf(state), {
      type: "RedriveRun",
      actor,
      reason,
      replay,
      version,
    });
    if (replay) this.results.forget(runId);
    this.enqueue(runId, done.state);
    return done.state;
  }

  /** Runs waiting for a worker, running, and the workers connected (for health and the API). */
  counts(): { queued: number; running: number; workers: number } {
    return {
      queued: this.queued.size + this.again.size,
      running: this.running.size,
      workers: this.workers.size,
    };
  }

  /** Workers connected now that serve `agent` (at `version`, when given). */
  workersServing(agent: string, version?: string): number {
    let n = 0;
    for (const { link } of this.workers.values()) {
      if (
        version === undefined
          ? [...link.serves].some((s) => s.startsWith(`${agent}\u0000`))
          : link.serves.has(`${agent}\u0000${version}`)
      )
        n += 1;
    }
    return n;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.sweeper);
    if (this.wakeAt !== undefined) clearTimeout(this.wakeAt.timer);
    for (const running of this.running.values()) {
      clearTimeout(running.ceiling);
      running.untail();
    }
  }

  // ---- Handing runs out (which run: handout.ts; its lease: lease.ts) ----

  /** Hands out what can be handed out now (coalesced: once per turn of the event loop). */
  dispatch(): void {
    if (this.dispatchPending || this.closed) return;
    this.dispatchPending = true;
    queueMicrotask(() => {
      this.dispatchPending = false;
      this.handOut();
    });
  }

  private handOut(): void {
    const nowMs = this.options.clock();
    let nextMs: number | undefined;
    for (const worker of this.workers.values()) {
      while (worker.busy.size < worker.link.slots) {
        const pick = pickRun({
          lists: [this.again, this.queued],
          link: worker.link,
          busy: this.workers.get(worker.link.id)?.busy,
          caps: this.options.caps,
          nextSteps: this.nextSteps,
          nowMs,
        });
        if (pick.queued === undefined) {
          if (pick.retryAtMs !== undefined) nextMs = Math.min(nextMs ?? pick.retryAtMs, pick.retryAtMs);
          break;
        }
        const queued = pick.queued;
        this.queued.delete(queued.runId);
        this.again.delete(queued.runId);
        worker.busy.add(queued.runId);
        // Its cap slot is taken now, before the lease is in the log: the next pick, in this
        // same turn, must see it taken.
        this.options.caps.started(capKeyOf(queued), queued.firstStart, nowMs);
        void this.leases.lease(queued, worker, nowMs);
      }
    }
    if (nextMs !== undefined) this.wakeUpAt(nextMs);
  }

  /**
   * What the log says of a run this scheduler lost track of (an append that landed though
   * it reported a failure): queued, it is queued here; running, it is watched like one
   * found at start (released if no worker claims it within a lease).
   */
  async found(runId: string): Promise<void> {
    if (this.running.has(runId) || this.leasing.has(runId)) return;
    const state = await this.options.ledger.latest(runId).catch(() => undefined);
    const durable = state?.durable;
    if (state === undefined || durable === null || durable === undefined) return;
    if (durable.phase === DurablePhase.Queued) this.enqueue(runId, state);
    else if (durable.phase === DurablePhase.Running) {
      this.adoptOrphan(runId, state);
      const orphan = this.running.get(runId);
      if (orphan !== undefined) orphan.expiresAtMs = this.options.clock() + this.options.leaseMs;
    }
    await this.controlled(runId);
  }

  /** Hands out again at `atMs`, when a run held back by a cap or a window may go. */
  private wakeUpAt(atMs: number): void {
    if (this.wakeAt !== undefined && this.wakeAt.atMs <= atMs) return;
    if (this.wakeAt !== undefined) clearTimeout(this.wakeAt.timer);
    const timer = setTimeout(
      () => {
        this.wakeAt = undefined;
        this.dispatch();
      },
      Math.max(1, atMs - this.options.clock()),
    );
    timer.unref();
    this.wakeAt = { atMs, timer };
  }
}
