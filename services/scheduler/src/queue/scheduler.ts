import { BusError } from "@holdfast/bus";
import {
  type Actor,
  ActorKind,
  type DecodedEnvelope,
  DurablePhase,
  DurableRunError,
  type DurableState,
  type RunCommand,
  type RunState,
  RunStatus,
  type StoredEnvelope,
} from "@holdfast/events";
import type { Logger } from "@holdfast/log";
import { decide as decideWindow, type KeyWindows, type Need } from "@holdfast/predict";
import {
  type DurableCaps,
  ReleaseReason,
  type RunAssigned,
  type RunDone,
  RunFailure,
  type SchedulerMessage,
  type StepReport,
} from "@holdfast/proto";
import type { Executed, Ledger } from "@holdfast/runs";
import type { CapBook, CapKey } from "./caps.js";
import { StepResults } from "./results.js";

/** A worker's session as the scheduler sees it: what it serves and how to reach it. */
export interface WorkerLink {
  /** Unique per session (a reconnect is a new session). */
  readonly id: string;
  /** As the worker named itself. */
  readonly name: string;
  readonly serves: ReadonlySet<string>;
  readonly slots: number;
  send(message: SchedulerMessage): void;
}

export interface SchedulerOptions {
  ledger: Ledger<RunState, RunCommand>;
  /** The run's events from the log, for a run whose recorded steps are not in memory. */
  readRun: (runId: string) => Promise<StoredEnvelope[]>;
  caps: CapBook;
  /** Provider keys' windows as the log reports them (RateLimitObserved). */
  windows: KeyWindows;
  clock: () => number;
  log: Logger;
  leaseMs: number;
  /** Hears a run's events as they are stored while it runs (its model calls), until the returned function is called. */
  tail: (runId: string) => () => void;
}

interface Queued {
  readonly runId: string;
  readonly agent: string;
  version: string;
  readonly tenant: string;
  readonly tag: string;
  readonly partitionKey: string;
  readonly caps: DurableCaps;
  readonly submittedMs: number;
  /** Not leased yet in this epoch: its start counts against the start rate. */
  firstStart: boolean;
  /** Held or stopped: no worker takes it until it is resumed. */
  held: boolean;
  /** Not handed out before this (its last lease could not be recorded). */
  notBeforeMs: number;
}

interface Running {
  readonly queued: Queued;
  readonly lease: number;
  readonly worker: WorkerLink;
  readonly leasedAtMs: number;
  /** Wall clock run under leases before this one. */
  readonly ranBeforeMs: number;
  expiresAtMs: number;
  /** Time its calls waited in the gateway for a provider's window (not counted by the ceiling). */
  waitedMs: number;
  ceiling: NodeJS.Timeout | undefined;
  untail: () => void;
  /** Its release is being recorded (a lease expiry is not acted on twice). */
  releasing: boolean;
  /** Its worker was sent the run (a run handed over with its lease still being written may not have been yet). */
  handedOver: boolean;
}

/** A run whose lease is being recorded: what to look at again once it is. */
interface Leasing {
  /** A hold or stop was heard meanwhile. */
  recheck: boolean;
  /** The lease was refused as the run is not queued: the log says where it stands. */
  refind: boolean;
}

interface Worker {
  readonly link: WorkerLink;
  /** Runs it holds a slot for: running, or told to let go and not yet done with. */
  readonly busy: Set<string>;
}

const SCHEDULER: Actor = { kind: ActorKind.ACTOR_KIND_SCHEDULER, name: "scheduler" };
const DEFAULT_CEILING_MS = 30 * 60_000;
// What a step (or a run's output) may record: its event must fit a NATS message (1 MiB by
// default) with room to spare.
const MAX_REPORT_BYTES = 768 * 1024;

/**
 * Hands durable runs to workers and keeps the log's account of them: leases, steps,
 * releases, ends. Every change is decided by the run's decider and appended through the
 * ledger, and a step is acknowledged only once it is recorded, so the log is the truth and
 * this process rebuilds from it. A worker is sent a run as its lease is appended (see
 * leaseNow): nothing it reports can land before the lease, and it is told to let go if
 * the lease does not land.
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
  private readonly needs = new Map<string, { keyId: string; need: Need; floor: Need }>();
  private dispatchPending = false;
  private wakeAt: { atMs: number; timer: NodeJS.Timeout } | undefined;
  private readonly sweeper: NodeJS.Timeout;
  private closed = false;

  constructor(private readonly options: SchedulerOptions) {
    this.results = new StepResults(options.readRun);
    this.sweeper = setInterval(() => this.expire(), Math.max(100, Math.min(1_000, options.leaseMs / 10)));
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
    this.armCeiling(orphan);
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
    if (held && running !== undefined) await this.letGo(running, ReleaseReason.RELEASE_REASON_HELD, "held");
  }

  /** One of a running run's own events, heard as it was stored (its model calls). */
  heard(runId: string, envelope: DecodedEnvelope): void {
    if (envelope.payload.$case !== "stepStarted") return;
    const prediction = envelope.payload.value.prediction;
    const running = this.running.get(runId);
    if (prediction === undefined) return;
    // What the agent's next step is likely to cost, on which key: the window it waits for.
    if (running !== undefined && prediction.keyId !== "") {
      // The estimate with its margin (k·σ), as the gateway will ask the window for it.
      const margin = Math.max(0, Number(prediction.k) * Number(prediction.sigma));
      this.needs.set(running.queued.agent, {
        keyId: prediction.keyId,
        need: {
          requests: 1,
          tokens: Number(prediction.estimatedTotalTokens) + margin,
          inputTokens: Number(prediction.estimatedInputTokens),
          outputTokens: Number(prediction.estimatedOutputTokens) + margin,
        },
        // The estimate without its margin: a margin past the whole window is cut to the
        // window, as the gateway cuts it, rather than making a call no window could fit.
        floor: {
          requests: 1,
          tokens: Number(prediction.estimatedTotalTokens),
          inputTokens: Number(prediction.estimatedInputTokens),
          outputTokens: Number(prediction.estimatedOutputTokens),
        },
      });
    }
    // Time a call waited for its window in the gateway does not count against the ceiling.
    if (running !== undefined && prediction.waitedMs > 0) {
      running.waitedMs += Number(prediction.waitedMs);
      this.armCeiling(running);
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
      this.armCeiling(adopted);
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
    await Promise.all(mine.map((running) => this.release(running, ReleaseReason.RELEASE_REASON_WORKER_GONE)));
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
      await this.execute(running.queued, {
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
    const ranMs = this.ranMs(running);
    if (Buffer.byteLength(report.outputJson) + Buffer.byteLength(report.error) > MAX_REPORT_BYTES) {
      report = {
        ...report,
        ok: false,
        outputJson: "",
        error: `the run's output may take at most ${MAX_REPORT_BYTES} bytes: keep large content elsewhere and return a reference`,
      };
    }
    try {
      await this.execute(
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
      this.ended(running);
      if (report.ok) this.results.forget(report.runId);
      return { ok: true, fenced: false, error: "" };
    } catch (error) {
      // Recorded by someone else first (a ceiling, a cancel): the run is over here too.
      if (error instanceof DurableRunError) this.ended(running);
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
      void this.release(running, ReleaseReason.RELEASE_REASON_WORKER_GONE);
    }
    this.dispatch();
  }

  // ---- Operators ----

  /** Fails a queued, running or held run as cancelled; its worker is told to let go. */
  async cancel(runId: string, actor: Actor, reason: string): Promise<RunState> {
    const running = this.running.get(runId);
    const state = await this.options.ledger.latest(runId);
    const ranMs = running !== undefined ? this.ranMs(running) : (state.durable?.ranMs ?? 0);
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
      this.ended(cancelled);
      this.revoke(cancelled, "cancelled");
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

  // ---- Handing runs out ----

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
        const pick = this.pick(worker.link, nowMs);
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
        void this.lease(queued, worker, nowMs);
      }
    }
    if (nextMs !== undefined) this.wakeUpAt(nextMs);
  }

  /** The first run this worker may take now; or when to look again for one held back by a cap or a window. */
  private pick(link: WorkerLink, nowMs: number): { queued?: Queued; retryAtMs?: number } {
    let retryAtMs: number | undefined;
    for (const list of [this.again, this.queued]) {
      for (const queued of list.values()) {
        if (queued.held || !link.serves.has(`${queued.agent}\u0000${queued.version}`)) continue;
        // Not to a worker still running it under an earlier lease (its code has not let go).
        if (this.workers.get(link.id)?.busy.has(queued.runId)) continue;
        if (queued.notBeforeMs > nowMs) {
          retryAtMs = Math.min(retryAtMs ?? queued.notBeforeMs, queued.notBeforeMs);
          continue;
        }
        const cap = this.options.caps.check(capKeyOf(queued), queued.caps, queued.firstStart, nowMs);
        if (!cap.allowed) {
          if (cap.retryAtMs !== undefined) retryAtMs = Math.min(retryAtMs ?? cap.retryAtMs, cap.retryAtMs);
          continue;
        }
        const windowAtMs = this.windowAt(queued.agent, nowMs);
        if (windowAtMs !== undefined) {
          retryAtMs = Math.min(retryAtMs ?? windowAtMs, windowAtMs);
          continue;
        }
        return { queued };
      }
    }
    return retryAtMs === undefined ? {} : { retryAtMs };
  }

  /**
   * When the agent's provider key's window fits its next step, if not now: an item is not
   * started into a window that cannot take its first call (it would only wait there,
   * holding a worker). Undefined when it fits, or nothing is known of the agent's key.
   */
  private windowAt(agent: string, nowMs: number): number | undefined {
    const known = this.needs.get(agent);
    if (known === undefined) return undefined;
    const window = this.options.windows.get(known.keyId);
    if (window === undefined) return undefined;
    const decision = decideWindow({
      window,
      need: known.need,
      floor: known.floor,
      nowMs,
      waitThresholdMs: Number.POSITIVE_INFINITY,
    });
    if (decision.action === "continue" || decision.action === "too_large") return undefined;
    return decision.untilMs;
  }

  private async lease(queued: Queued, worker: Worker, pickedAtMs: number): Promise<void> {
    const { runId } = queued;
    const leasing: Leasing = { recheck: false, refind: false };
    this.leasing.set(runId, leasing);
    try {
      await this.leaseNow(queued, worker, pickedAtMs, leasing);
    } finally {
      this.leasing.delete(runId);
      // What the log says of a run whose lease was refused as not queued, now that it is
      // no longer being leased (found() leaves a run being leased alone).
      if (leasing.refind) void this.found(runId).catch(() => undefined);
      // A hold or stop heard while the lease was recorded is acted on now.
      else if (leasing.recheck) void this.controlled(runId).catch(() => undefined);
    }
  }

  private async leaseNow(
    queued: Queued,
    worker: Worker,
    pickedAtMs: number,
    leasing: Leasing,
  ): Promise<void> {
    const { runId } = queued;
    const command: RunCommand = { type: "LeaseRun", worker: worker.link.name, leaseMs: this.options.leaseMs };
    // Handed over as its lease is written: when the run's state here says what the lease
    // will be, the worker is given the run while the append (an fsync with the log's
    // `sync_interval: always`) is under way, instead of after its ack. Nothing the worker
    // reports can be recorded before the lease: the run's commands are decided one after
    // another, the lease's first, and its writes are fenced by it. Should the lease not
    // land, the worker is told its lease is over, like any worker whose lease ends
    // mid-step: a step it ran meanwhile was never recorded and runs again under the next
    // lease, as after a crash (a model call it made meanwhile went through the gateway,
    // metered on the run like any call, and is aborted with the run).
    const ahead = this.foresee(runId, command);
    const appending = this.execute(queued, command);
    let handing: Promise<void> | undefined;
    let early: Running | undefined;
    if (ahead !== undefined) {
      early = this.leased(queued, worker, ahead.lease, ahead.durable);
      handing = this.handOver(early, ahead.durable);
      // Not awaited on every path below (a lease that did not land): never unhandled.
      handing.catch((error: unknown) =>
        this.options.log.warn({ err: error, runId }, "could not hand a run over"),
      );
    }
    let done: Executed<RunState>;
    try {
      done = await appending;
    } catch (error) {
      // The append's outcome is unknown (its ack lost, the log unreachable): a worker handed
      // the run early keeps it if the log has its lease after all.
      if (early !== undefined && !(error instanceof DurableRunError) && (await this.landed(runId, early))) {
        queued.firstStart = false;
        return await handing;
      }
      if (early === undefined) worker.busy.delete(runId);
      if (early === undefined || this.unleased(early, worker, "its lease could not be recorded")) {
        this.options.caps.unstarted(capKeyOf(queued), queued.firstStart, pickedAtMs);
      }
      if (error instanceof DurableRunError) {
        // Held meanwhile: it waits for its resume. Not queued: the lease may have landed
        // while its append failed (an ack lost), in which case the run is running under it.
        if (error.reason === "held") this.again.set(runId, { ...queued, held: true });
        else if (error.reason === "not_queued") leasing.refind = true;
      } else {
        this.options.log.warn({ err: error, runId }, "could not lease a run; it stays queued");
        this.again.set(runId, { ...queued, notBeforeMs: this.options.clock() + 1_000 });
      }
      this.dispatch();
      return;
    }
    const event = done.events[0];
    const durable = done.state.durable!;
    const landed = event?.payload.$case === "runLeased" ? event.payload.value.lease : 0;
    // No longer this attempt's to settle (whatever ended it settled its slots).
    if (early !== undefined && this.running.get(runId) !== early) return;
    if (
      landed === 0 ||
      !this.workers.has(worker.link.id) ||
      (early !== undefined && early.lease !== landed)
    ) {
      // The worker left while the lease was recorded (or, handed over early, the lease that
      // landed is not the one it was told): give the run back at once.
      if (early !== undefined) this.unleased(early, worker, "its lease was not the one recorded");
      else worker.busy.delete(runId);
      this.options.caps.unstarted(capKeyOf(queued), queued.firstStart, pickedAtMs);
      if (landed !== 0) {
        await this.execute(queued, {
          type: "ReleaseRun",
          lease: durable.lease,
          reason: ReleaseReason.RELEASE_REASON_WORKER_GONE,
          ranMs: durable.ranMs,
        }).catch(() => undefined);
        this.enqueue(runId, await this.options.ledger.latest(runId));
      }
      return;
    }
    queued.firstStart = false;
    if (handing !== undefined) return await handing;
    await this.handOver(this.leased(queued, worker, durable.lease, durable), durable);
  }

  /** Whether the log has the run running under `early`'s lease, and it is still this process's account of it. */
  private async landed(runId: string, early: Running): Promise<boolean> {
    const state = await this.options.ledger.latest(runId).catch(() => undefined);
    const durable = state?.durable;
    return (
      durable != null &&
      durable.phase === DurablePhase.Running &&
      durable.lease === early.lease &&
      this.running.get(runId) === early
    );
  }

  /** What the lease `command` will be, if this process's state of the run says so now. */
  private foresee(runId: string, command: RunCommand): { lease: number; durable: DurableState } | undefined {
    const state = this.options.ledger.cached(runId);
    const event = this.options.ledger.foresee(runId, command)?.[0];
    if (state?.durable == null || event?.$case !== "runLeased") return undefined;
    return { lease: event.value.lease, durable: state.durable };
  }

  /** The run is running on `worker` under `lease`, as of its state `durable` (before the lease). */
  private leased(queued: Queued, worker: Worker, lease: number, durable: DurableState): Running {
    const nowMs = this.options.clock();
    const running: Running = {
      queued,
      lease,
      worker: worker.link,
      leasedAtMs: nowMs,
      ranBeforeMs: durable.ranMs,
      expiresAtMs: nowMs + this.options.leaseMs,
      waitedMs: 0,
      ceiling: undefined,
      untail: this.options.tail(queued.runId),
      releasing: false,
      handedOver: false,
    };
    this.running.set(queued.runId, running);
    this.armCeiling(running);
    return running;
  }

  /**
   * A lease handed over early did not land as told: the run no longer runs here, and its
   * worker is told to let go (its slot frees when it has; at once if it was not sent the
   * run yet). False when it no longer ran here under that lease.
   */
  private unleased(running: Running, worker: Worker, reason: string): boolean {
    const { runId } = running.queued;
    if (this.running.get(runId) !== running) return false;
    this.running.delete(runId);
    clearTimeout(running.ceiling);
    running.untail();
    if (running.handedOver) this.revoke(running, reason);
    else worker.busy.delete(runId);
    return true;
  }

  /** Sends the worker its run: the steps it may reuse, the time left under its ceiling. */
  private async handOver(running: Running, durable: DurableState): Promise<void> {
    const { runId } = running.queued;
    let steps: Awaited<ReturnType<StepResults["of"]>>;
    try {
      steps = await this.results.of(runId, durable);
    } catch (error) {
      if (this.running.get(runId) !== running) return;
      this.options.log.warn({ err: error, runId }, "could not read the run's recorded steps; releasing it");
      this.workers.get(running.worker.id)?.busy.delete(runId);
      await this.release(running, ReleaseReason.RELEASE_REASON_WORKER_GONE);
      return;
    }
    // Let go of meanwhile (its lease did not land, it was cancelled): not sent.
    if (this.running.get(runId) !== running) return;
    const assigned: RunAssigned = {
      runId,
      lease: running.lease,
      agent: durable.agent,
      version: durable.version,
      inputJson: durable.inputJson,
      steps: steps.steps,
      remainingMs: Math.max(0, ceilingOf(durable) - durable.ranMs),
      tag: running.queued.tag,
      tenant: running.queued.tenant,
      attempts: steps.attempts,
    };
    running.handedOver = true;
    running.worker.send({ message: { $case: "assigned", value: assigned } });
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

  // ---- Letting go ----

  /** Records the run released (it is queued again, reusing its steps) and frees its slot. */
  private async release(running: Running, reason: ReleaseReason): Promise<void> {
    const { runId } = running.queued;
    if (this.running.get(runId) !== running || running.releasing) return;
    running.releasing = true;
    try {
      await this.execute(running.queued, {
        type: "ReleaseRun",
        lease: running.lease,
        reason,
        ranMs: this.ranMs(running),
      });
    } catch (error) {
      if (!(error instanceof DurableRunError)) {
        this.options.log.warn({ err: error, runId }, "could not record a run released; trying again shortly");
        running.releasing = false;
        setTimeout(() => void this.release(running, reason), 1_000).unref();
        return;
      }
    }
    this.ended(running);
    const state = await this.options.ledger.latest(runId).catch(() => undefined);
    if (state !== undefined) {
      this.enqueue(runId, state);
      // Held, it waits for its resume; stopped, it is cancelled.
      if (state.status === RunStatus.Stopped) await this.controlled(runId).catch(() => undefined);
    }
  }

  /** Lets go of a run its worker still runs (held, lease expired): recorded, then the worker told. */
  private async letGo(running: Running, reason: ReleaseReason, why: string): Promise<void> {
    await this.release(running, reason);
    this.revoke(running, why);
  }

  private revoke(running: Running, reason: string): void {
    running.worker.send({
      message: {
        $case: "revoked",
        value: { runId: running.queued.runId, lease: running.lease, reason },
      },
    });
  }

  /** The run no longer runs here: its cap slot is free (its worker's slot frees when the worker is done with it). */
  private ended(running: Running): void {
    const { runId } = running.queued;
    if (this.running.get(runId) !== running) return;
    this.running.delete(runId);
    clearTimeout(running.ceiling);
    running.untail();
    this.options.caps.stopped(capKeyOf(running.queued));
    this.dispatch();
  }

  /** Leases nobody renewed: released (a hung worker's run goes to another; its late writes are fenced). */
  private expire(): void {
    const nowMs = this.options.clock();
    for (const running of [...this.running.values()]) {
      if (running.expiresAtMs > nowMs || running.releasing) continue;
      this.options.log.warn(
        { runId: running.queued.runId, worker: running.worker.name, lease: running.lease },
        "a worker's lease expired without a heartbeat; its run goes back on the queue",
      );
      // Its worker (hung, not gone) keeps its slot until it says it let go.
      void this.letGo(running, ReleaseReason.RELEASE_REASON_LEASE_EXPIRED, "lease_expired");
    }
  }

  /** (Re)arms the run's ceiling: what is left of it, its waits for windows given back. */
  private armCeiling(running: Running): void {
    clearTimeout(running.ceiling);
    const ceilingMs = running.queued.caps.ceilingMs > 0 ? running.queued.caps.ceilingMs : DEFAULT_CEILING_MS;
    const leftMs = ceilingMs - this.ranMs(running);
    running.ceiling = setTimeout(() => void this.timeout(running, ceilingMs), Math.max(0, leftMs));
    running.ceiling.unref();
  }

  private async timeout(running: Running, ceilingMs: number): Promise<void> {
    const { runId } = running.queued;
    if (this.running.get(runId) !== running) return;
    try {
      await this.execute(running.queued, {
        type: "FailRun",
        lease: 0,
        failure: RunFailure.RUN_FAILURE_TIMEOUT,
        error: `timeout: the run ran for more than ${Math.round(ceilingMs / 1_000)} s`,
        ranMs: this.ranMs(running),
        actor: SCHEDULER,
        label: "",
        ordinal: 0,
      });
    } catch (error) {
      if (!(error instanceof DurableRunError)) {
        this.options.log.warn(
          { err: error, runId },
          "could not record a run's timeout; trying again shortly",
        );
        running.ceiling = setTimeout(() => void this.timeout(running, ceilingMs), 1_000);
        return;
      }
    }
    this.ended(running);
    this.revoke(running, "timeout");
  }

  private ranMs(running: Running): number {
    const nowMs = this.options.clock();
    return Math.max(0, running.ranBeforeMs + (nowMs - running.leasedAtMs) - running.waitedMs);
  }

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

  private execute(queued: Queued, command: RunCommand): Promise<Executed<RunState>> {
    return this.options.ledger.execute(queued.runId, { tag: queued.tag, tenant: queued.tenant }, command);
  }
}

/** A run whose worker has not said it still runs it (this scheduler restarted). */
const ORPHANED: WorkerLink = Object.freeze({
  id: "",
  name: "",
  serves: new Set<string>(),
  slots: 0,
  send: () => undefined,
});

function queuedOf(runId: string, state: RunState, durable: DurableState): Queued {
  return {
    runId,
    agent: durable.agent,
    version: durable.version,
    tenant: state.tenant,
    tag: state.tag,
    partitionKey: durable.partitionKey,
    caps: durable.caps,
    submittedMs: durable.submittedMs,
    firstStart: durable.leases === 0,
    held: state.status === RunStatus.Held || state.status === RunStatus.Stopped,
    notBeforeMs: 0,
  };
}

function capKeyOf(queued: Queued): CapKey {
  return { tenant: queued.tenant, agent: queued.agent, partitionKey: queued.partitionKey };
}

export function ceilingOf(durable: DurableState): number {
  return durable.caps.ceilingMs > 0 ? durable.caps.ceilingMs : DEFAULT_CEILING_MS;
}

function labelsOf(state: RunState): { tag: string; tenant: string } {
  return { tag: state.tag, tenant: state.tenant };
}

function failure(error: unknown): { ok: false; fenced: boolean; error: string } {
  if (error instanceof DurableRunError)
    return { ok: false, fenced: error.reason === "fenced", error: error.message };
  if (error instanceof BusError) return { ok: false, fenced: false, error: `unavailable: ${error.message}` };
  return { ok: false, fenced: false, error: (error as Error).message };
}
