import { heldByCheckpoint, type RunCommand, type RunState, type Trip } from "@holdfast/events";
import type { Logger } from "@holdfast/log";
import { LimitKind, PredictAction } from "@holdfast/proto";
import type { Ledger, RunLabels } from "@holdfast/runs";
import type { Call, Verdict } from "../pipeline/hooks.js";
import type { Predicted } from "./estimate.js";
import { type Ceiling, type CheckpointDecision, ceilingLeftMs } from "./policy.js";
import { predictionOf, waitedTooLong } from "./verdicts.js";

export interface CheckpointsOptions {
  ledger: Ledger<RunState, RunCommand>;
  gateway: string;
  onCheckpoint: "auto_resume" | "hold";
  maxWaitMs: number;
  clock: () => number;
  log: Logger;
}

/**
 * Rate-limit checkpoints: a run whose call would wait longer than the threshold (or past
 * its deadline) is held with reason rate_limit, its call parked with a ceiling; with
 * `auto_resume`, this gateway's timer (or any call that finds the window open) appends
 * `ClearCheckpoint` when the window allows.
 */
export class Checkpoints {
  private readonly resumes = new Map<string, NodeJS.Timeout>();

  constructor(private readonly options: CheckpointsOptions) {}

  /** Holds the run until the window allows its call; the call parks, with a ceiling. */
  hold(call: Call, predicted: Predicted, decision: CheckpointDecision, waitedMs: number): Verdict {
    const { clock } = this.options;
    const prediction = predictionOf(
      PredictAction.PREDICT_ACTION_CHECKPOINT,
      predicted.key.keyId,
      decision.figures,
      predicted,
      {
        waitedMs,
        resumeAtMs: decision.untilMs,
      },
    );
    if (this.options.onCheckpoint === "auto_resume") this.scheduleResume(call, decision.untilMs);
    if (predicted.ceiling === undefined) {
      const ceiling: Ceiling = { sinceMs: predicted.sinceMs, maxWaitMs: this.options.maxWaitMs };
      predicted.ceiling = setTimeout(
        () => {
          call.cancel({ kind: "gave_up", error: waitedTooLong(Math.max(0, decision.untilMs - clock())) });
        },
        ceilingLeftMs(clock(), ceiling),
      );
      predicted.ceiling.unref();
    }
    const trip: Trip = {
      limit: LimitKind.LIMIT_KIND_RATE_LIMIT,
      limitValue: Math.round(decision.figures.limit),
      spentValue: Math.round(decision.figures.needed),
      budgetKey: "",
      period: "",
      crossedByStepId: "",
      callModel: call.view.model,
      prediction,
    };
    return { kind: "park", trip, action: "hold" };
  }

  /**
   * A call that finds the window open while its run is still checkpointed (the gateway
   * that checkpointed it died, or its timer has not fired yet) resumes the run itself.
   */
  async resumeIfCheckpointed(call: Call): Promise<void> {
    if (this.options.onCheckpoint !== "auto_resume") return;
    const state = this.options.ledger.cached(call.run.runId);
    if (state === undefined || !heldByCheckpoint(state)) return;
    clearTimeout(this.resumes.get(call.run.runId));
    this.resumes.delete(call.run.runId);
    await this.resume(call.run.runId, { tag: call.run.tag, tenant: call.run.tenant });
  }

  close(): void {
    for (const timer of this.resumes.values()) clearTimeout(timer);
    this.resumes.clear();
  }

  /** On this gateway, resumes the run at `atMs` if the checkpoint still holds it then. */
  private scheduleResume(call: Call, atMs: number): void {
    const runId = call.run.runId;
    clearTimeout(this.resumes.get(runId));
    const labels: RunLabels = { tag: call.run.tag, tenant: call.run.tenant };
    const timer = setTimeout(
      () => {
        this.resumes.delete(runId);
        void this.resume(runId, labels);
      },
      Math.max(0, atMs - this.options.clock()),
    );
    timer.unref();
    this.resumes.set(runId, timer);
  }

  private async resume(runId: string, labels: RunLabels): Promise<void> {
    try {
      await this.options.ledger.execute(runId, labels, {
        type: "ClearCheckpoint",
        gateway: this.options.gateway,
      });
    } catch (error) {
      this.options.log.error({ err: error, runId }, "could not resume a rate-limit checkpoint");
    }
  }
}
