import { DurableRunError, RunStatus } from "@holdfast/events";
import { ReleaseReason, RunFailure } from "@holdfast/proto";
import { type Core, capKeyOf, DEFAULT_CEILING_MS, type Running, SCHEDULER } from "./state.js";

/**
 * Letting go of a run: released (queued again, reusing its steps), timed out past its
 * ceiling, or its lease expired without a heartbeat. Each is recorded first, and the
 * worker told after.
 */
export class LettingGo {
  constructor(private readonly core: Core) {}

  /** Records the run released (it is queued again, reusing its steps) and frees its slot. */
  async release(running: Running, reason: ReleaseReason): Promise<void> {
    const { runId } = running.queued;
    if (this.core.running.get(runId) !== running || running.releasing) return;
    running.releasing = true;
    try {
      await this.core.execute(running.queued, {
        type: "ReleaseRun",
        lease: running.lease,
        reason,
        ranMs: this.ranMs(running),
      });
    } catch (error) {
      if (!(error instanceof DurableRunError)) {
        this.core.options.log.warn(
          { err: error, runId },
          "could not record a run released; trying again shortly",
        );
        running.releasing = false;
        setTimeout(() => void this.release(running, reason), 1_000).unref();
        return;
      }
    }
    this.ended(running);
    const state = await this.core.options.ledger.latest(runId).catch(() => undefined);
    if (state !== undefined) {
      this.core.enqueue(runId, state);
      // Held, it waits for its resume; stopped, it is cancelled.
      if (state.status === RunStatus.Stopped) await this.core.controlled(runId).catch(() => undefined);
    }
  }

  /** Lets go of a run its worker still runs (held, lease expired): recorded, then the worker told. */
  async letGo(running: Running, reason: ReleaseReason, why: string): Promise<void> {
    await this.release(running, reason);
    this.revoke(running, why);
  }

  revoke(running: Running, reason: string): void {
    running.worker.send({
      message: {
        $case: "revoked",
        value: { runId: running.queued.runId, lease: running.lease, reason },
      },
    });
  }

  /** The run no longer runs here: its cap slot is free (its worker's slot frees when the worker is done with it). */
  ended(running: Running): void {
    const { runId } = running.queued;
    if (this.core.running.get(runId) !== running) return;
    this.core.running.delete(runId);
    clearTimeout(running.ceiling);
    running.untail();
    this.core.options.caps.stopped(capKeyOf(running.queued));
    this.core.dispatch();
  }

  /** Leases nobody renewed: released (a hung worker's run goes to another; its late writes are fenced). */
  expire(): void {
    const nowMs = this.core.options.clock();
    for (const running of [...this.core.running.values()]) {
      if (running.expiresAtMs > nowMs || running.releasing) continue;
      this.core.options.log.warn(
        { runId: running.queued.runId, worker: running.worker.name, lease: running.lease },
        "a worker's lease expired without a heartbeat; its run goes back on the queue",
      );
      // Its worker (hung, not gone) keeps its slot until it says it let go.
      void this.letGo(running, ReleaseReason.RELEASE_REASON_LEASE_EXPIRED, "lease_expired");
    }
  }

  /** (Re)arms the run's ceiling: what is left of it, its waits for windows given back. */
  armCeiling(running: Running): void {
    clearTimeout(running.ceiling);
    const ceilingMs = running.queued.caps.ceilingMs > 0 ? running.queued.caps.ceilingMs : DEFAULT_CEILING_MS;
    const leftMs = ceilingMs - this.ranMs(running);
    running.ceiling = setTimeout(() => void this.timeout(running, ceilingMs), Math.max(0, leftMs));
    running.ceiling.unref();
  }

  private async timeout(running: Running, ceilingMs: number): Promise<void> {
    const { runId } = running.queued;
    if (this.core.running.get(runId) !== running) return;
    try {
      await this.core.execute(running.queued, {
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
        this.core.options.log.warn(
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

  ranMs(running: Running): number {
    const nowMs = this.core.options.clock();
    return Math.max(0, running.ranBeforeMs + (nowMs - running.leasedAtMs) - running.waitedMs);
  }
}
