import {
  DurablePhase,
  DurableRunError,
  type DurableState,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import { ReleaseReason, type RunAssigned } from "@holdfast/proto";
import type { Executed } from "@holdfast/runs";
import type { LettingGo } from "./letgo.js";
import type { StepResults } from "./results.js";
import {
  type Core,
  capKeyOf,
  ceilingOf,
  type Leasing,
  type Queued,
  type Running,
  type Worker,
} from "./state.js";

/**
 * Leasing a run to a worker: the lease appended through the run's decider, the worker
 * handed the run as the lease is written (see leaseNow), and everything that can go wrong
 * meanwhile (the append's outcome unknown, the worker gone, another lease landed) settled.
 */
export class Leases {
  constructor(
    private readonly core: Core,
    private readonly lettingGo: LettingGo,
  ) {}

  async lease(queued: Queued, worker: Worker, pickedAtMs: number): Promise<void> {
    const { runId } = queued;
    const leasing: Leasing = { recheck: false, refind: false };
    this.core.leasing.set(runId, leasing);
    try {
      await this.leaseNow(queued, worker, pickedAtMs, leasing);
    } finally {
      this.core.leasing.delete(runId);
      // What the log says of a run whose lease was refused as not queued, now that it is
      // no longer being leased (found() leaves a run being leased alone).
      if (leasing.refind) void this.core.found(runId).catch(() => undefined);
      // A hold or stop heard while the lease was recorded is acted on now.
      else if (leasing.recheck) void this.core.controlled(runId).catch(() => undefined);
    }
  }

  private async leaseNow(
    queued: Queued,
    worker: Worker,
    pickedAtMs: number,
    leasing: Leasing,
  ): Promise<void> {
    const { runId } = queued;
    const command: RunCommand = {
      type: "LeaseRun",
      worker: worker.link.name,
      leaseMs: this.core.options.leaseMs,
    };
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
    const appending = this.core.execute(queued, command);
    let handing: Promise<void> | undefined;
    let early: Running | undefined;
    if (ahead !== undefined) {
      early = this.leased(queued, worker, ahead.lease, ahead.durable);
      handing = this.handOver(early, ahead.durable);
      // Not awaited on every path below (a lease that did not land): never unhandled.
      handing.catch((error: unknown) =>
        this.core.options.log.warn({ err: error, runId }, "could not hand a run over"),
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
        this.core.options.caps.unstarted(capKeyOf(queued), queued.firstStart, pickedAtMs);
      }
      if (error instanceof DurableRunError) {
        // Held meanwhile: it waits for its resume. Not queued: the lease may have landed
        // while its append failed (an ack lost), in which case the run is running under it.
        if (error.reason === "held") this.core.again.set(runId, { ...queued, held: true });
        else if (error.reason === "not_queued") leasing.refind = true;
      } else {
        this.core.options.log.warn({ err: error, runId }, "could not lease a run; it stays queued");
        this.core.again.set(runId, { ...queued, notBeforeMs: this.core.options.clock() + 1_000 });
      }
      this.core.dispatch();
      return;
    }
    const event = done.events[0];
    const durable = done.state.durable!;
    const landed = event?.payload.$case === "runLeased" ? event.payload.value.lease : 0;
    // No longer this attempt's to settle (whatever ended it settled its slots).
    if (early !== undefined && this.core.running.get(runId) !== early) return;
    if (
      landed === 0 ||
      !this.core.workers.has(worker.link.id) ||
      (early !== undefined && early.lease !== landed)
    ) {
      // The worker left while the lease was recorded (or, handed over early, the lease that
      // landed is not the one it was told): give the run back at once.
      if (early !== undefined) this.unleased(early, worker, "its lease was not the one recorded");
      else worker.busy.delete(runId);
      this.core.options.caps.unstarted(capKeyOf(queued), queued.firstStart, pickedAtMs);
      if (landed !== 0) {
        await this.core
          .execute(queued, {
            type: "ReleaseRun",
            lease: durable.lease,
            reason: ReleaseReason.RELEASE_REASON_WORKER_GONE,
            ranMs: durable.ranMs,
          })
          .catch(() => undefined);
        this.core.enqueue(runId, await this.core.options.ledger.latest(runId));
      }
      return;
    }
    queued.firstStart = false;
    if (handing !== undefined) return await handing;
    await this.handOver(this.leased(queued, worker, durable.lease, durable), durable);
  }

  /** Whether the log has the run running under `early`'s lease, and it is still this process's account of it. */
  private async landed(runId: string, early: Running): Promise<boolean> {
    const state = await this.core.options.ledger.latest(runId).catch(() => undefined);
    const durable = state?.durable;
    return (
      durable != null &&
      durable.phase === DurablePhase.Running &&
      durable.lease === early.lease &&
      this.core.running.get(runId) === early
    );
  }

  /** What the lease `command` will be, if this process's state of the run says so now. */
  private foresee(runId: string, command: RunCommand): { lease: number; durable: DurableState } | undefined {
    const state = this.core.options.ledger.cached(runId);
    const event = this.core.options.ledger.foresee(runId, command)?.[0];
    if (state?.durable == null || event?.$case !== "runLeased") return undefined;
    return { lease: event.value.lease, durable: state.durable };
  }

  /** The run is running on `worker` under `lease`, as of its state `durable` (before the lease). */
  private leased(queued: Queued, worker: Worker, lease: number, durable: DurableState): Running {
    const nowMs = this.core.options.clock();
    const running: Running = {
      queued,
      lease,
      worker: worker.link,
      leasedAtMs: nowMs,
      ranBeforeMs: durable.ranMs,
      expiresAtMs: nowMs + this.core.options.leaseMs,
      waitedMs: 0,
      ceiling: undefined,
      untail: this.core.options.tail(queued.runId),
      releasing: false,
      handedOver: false,
    };
    this.core.running.set(queued.runId, running);
    this.lettingGo.armCeiling(running);
    return running;
  }

  /**
   * A lease handed over early did not land as told: the run no longer runs here, and its
   * worker is told to let go (its slot frees when it has; at once if it was not sent the
   * run yet). False when it no longer ran here under that lease.
   */
  private unleased(running: Running, worker: Worker, reason: string): boolean {
    const { runId } = running.queued;
    if (this.core.running.get(runId) !== running) return false;
    this.core.running.delete(runId);
    clearTimeout(running.ceiling);
    running.untail();
    if (running.handedOver) this.lettingGo.revoke(running, reason);
    else worker.busy.delete(runId);
    return true;
  }

  /** Sends the worker its run: the steps it may reuse, the time left under its ceiling. */
  private async handOver(running: Running, durable: DurableState): Promise<void> {
    const { runId } = running.queued;
    let steps: Awaited<ReturnType<StepResults["of"]>>;
    try {
      steps = await this.core.results.of(runId, durable);
    } catch (error) {
      if (this.core.running.get(runId) !== running) return;
      this.core.options.log.warn(
        { err: error, runId },
        "could not read the run's recorded steps; releasing it",
      );
      this.core.workers.get(running.worker.id)?.busy.delete(runId);
      await this.lettingGo.release(running, ReleaseReason.RELEASE_REASON_WORKER_GONE);
      return;
    }
    // Let go of meanwhile (its lease did not land, it was cancelled): not sent.
    if (this.core.running.get(runId) !== running) return;
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
}
