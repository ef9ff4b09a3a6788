import type { Bus } from "@holdfast/bus";
import { apiFromName, type EventPayload, FailureReason, foldRun, type RunState } from "@holdfast/events";
import type { Logger } from "@holdfast/log";
import type { RunLedger } from "../ledger/ledger.js";
import type { Liveness } from "./liveness.js";

export interface ReaperOptions {
  bus: Bus;
  ledger: RunLedger;
  liveness: Liveness;
  log: Logger;
  intervalMs: number;
}

/**
 * Finishes the calls a dead gateway left in flight. A process killed mid-call never
 * appends the call's outcome, so without this its run would read "running" forever.
 * Every gateway reaps; the runs' sequence checks and a decision re-made on the current
 * state make sure each orphan gets exactly one StepFailed (reason gateway_error, usage
 * and cost unknown: the provider may have answered and billed).
 */
export class Reaper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<number> | undefined;

  constructor(private readonly options: ReaperOptions) {}

  start(): void {
    this.timer = setInterval(() => {
      this.reapOnce().catch((error: unknown) =>
        this.options.log.warn({ err: error }, "reaping orphaned calls failed"),
      );
    }, this.options.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running?.catch(() => undefined);
  }

  /** One pass; returns how many orphaned calls it marked failed. */
  reapOnce(): Promise<number> {
    this.running ??= this.pass().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async pass(): Promise<number> {
    const { bus, ledger, liveness, log } = this.options;
    const open = new Map<string, number>();
    for (const [runId, n] of await bus.countsByRun("StepStarted")) open.set(runId, n);
    for (const type of ["StepCompleted", "StepFailed"] as const) {
      for (const [runId, n] of await bus.countsByRun(type)) open.set(runId, (open.get(runId) ?? 0) - n);
    }
    let reaped = 0;
    for (const [runId, inFlight] of open) {
      if (inFlight <= 0) continue;
      const history = await bus.readRun(runId);
      const state = foldRun(
        runId,
        history.events.map((e) => e.envelope),
      );
      for (const step of state.steps) {
        if (step.status !== "in_flight" || (await liveness.isAlive(step.gateway))) continue;
        const { event } = await ledger.appendIfNeeded(runId, state.tag, (current) =>
          orphanFailure(current, step.stepId),
        );
        if (event) {
          reaped += 1;
          log.warn(
            { runId, step: step.step, gateway: step.gateway },
            "marked a call failed: its gateway died",
          );
        }
      }
    }
    return reaped;
  }
}

/** The StepFailed for an orphaned step, or nothing if it has finished meanwhile. */
function orphanFailure(state: RunState, stepId: string): EventPayload | undefined {
  const step = state.steps.find((s) => s.stepId === stepId);
  if (step === undefined || step.status !== "in_flight") return undefined;
  return {
    $case: "stepFailed",
    value: {
      stepId,
      step: step.step,
      api: apiFromName(step.api),
      model: step.model,
      upstreamStatus: 0,
      reason: FailureReason.FAILURE_REASON_GATEWAY_ERROR,
      errorType: "gateway_lost",
      errorCode: "",
      errorMessage: `The gateway handling this call (${step.gateway}) stopped before the call finished; its outcome is unknown.`,
      usage: { reported: false, inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 },
      cost: { known: false, nanoUsd: 0 },
      latencyMs: 0,
      firstByteMs: 0,
      stream: step.stream,
    },
  };
}
