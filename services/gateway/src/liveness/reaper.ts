import type { Bus } from "@holdfast/bus";
import {
  type FailStep,
  FailureReason,
  foldRun,
  type OpenStep,
  type RunCommand,
  type RunState,
  UnparkReason,
} from "@holdfast/events";
import type { Logger } from "@holdfast/log";
import { NO_USAGE, type Pricer, providerFromUpstream } from "@holdfast/providers";
import type { Ledger } from "@holdfast/runs";
import { meterOutcome } from "../metering/meter.js";
import type { Liveness } from "./liveness.js";

export interface ReaperOptions {
  bus: Bus;
  ledger: Ledger<RunState, RunCommand>;
  liveness: Liveness;
  pricer: Pricer;
  /** Whether a cost limit or budget applies to a run (a model with no price is then charged at the unknown rate). */
  costControlled: (runId: string, tag: string) => boolean;
  log: Logger;
  intervalMs: number;
}

/**
 * Finishes the calls a dead gateway left in flight. A process killed mid-call never
 * appends the call's outcome (or dies before the log acknowledged it), so without this its
 * run would read "running" forever and an answered call would go unmetered. Each orphan
 * gets one StepFailed (reason gateway_error) charged from what its start recorded: the
 * input estimated from the request and the run's average output so far, priced, and
 * marked estimated. Every gateway reaps; a decision re-made on the run as the log has it,
 * under the run's sequence check, makes sure no orphan is failed twice.
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
    // Runs with more starts than outcomes, or more parked calls than unparked ones.
    const open = new Map<string, number>();
    const count = async (type: Parameters<Bus["countsByRun"]>[0], sign: 1 | -1) => {
      for (const [runId, n] of await bus.countsByRun(type))
        open.set(runId, (open.get(runId) ?? 0) + sign * n);
    };
    await count("StepStarted", 1);
    await count("StepCompleted", -1);
    await count("StepFailed", -1);
    const parked = new Map<string, number>();
    for (const [runId, n] of await bus.countsByRun("CallParked")) parked.set(runId, n);
    for (const [runId, n] of await bus.countsByRun("CallUnparked"))
      parked.set(runId, (parked.get(runId) ?? 0) - n);
    let reaped = 0;
    for (const runId of new Set([...open.keys(), ...parked.keys()])) {
      if ((open.get(runId) ?? 0) <= 0 && (parked.get(runId) ?? 0) <= 0) continue;
      const history = await bus.readRun(runId);
      const state = foldRun(
        runId,
        history.events.map((e) => e.envelope),
      );
      // The ledger decides on the run as it holds it, which may lack the dead gateway's last
      // events (appending nothing, it would never meet the sequence check): brought up to
      // the log first.
      await ledger.latest(runId);
      // A call parked on a dead gateway went with it (its client's connection dropped):
      // the run stays held for its next call.
      for (const call of state.parked.values()) {
        if (await liveness.isAlive(call.gateway)) continue;
        await ledger.execute(
          runId,
          { tag: state.tag, tenant: state.tenant },
          {
            type: "UnparkCall",
            parkId: call.parkId,
            how: UnparkReason.UNPARK_REASON_GATEWAY_LOST,
            parkedMs: Math.max(0, Date.now() - call.sinceMs),
          },
        );
      }
      for (const step of state.open.values()) {
        if (await liveness.isAlive(step.gateway)) continue;
        const { events } = await ledger.execute(
          runId,
          { tag: state.tag, tenant: state.tenant },
          this.charge(state, step),
        );
        if (events.length > 0) {
          reaped += 1;
          log.warn(
            { runId, step: step.step, gateway: step.gateway },
            "charged a call whose gateway died, from its estimate",
          );
        }
      }
    }
    return reaped;
  }

  /** The lost step's outcome: failed, charged from the estimate its start recorded. */
  private charge(state: RunState, step: OpenStep): FailStep {
    // Not the provider's report: the provider's answer (if any) was lost with the gateway.
    const metered = meterOutcome(
      {
        model: step.model,
        provider: providerFromUpstream(step.upstream),
        usage: NO_USAGE,
        answered: "lost",
        estimatedInputTokens: step.estimatedInputTokens,
        seenOutputTokens: 0,
        run: state,
        costControlled: () => this.options.costControlled(state.runId, state.tag),
      },
      this.options.pricer,
    );
    return {
      type: "FailStep",
      stepId: step.stepId,
      outcome: {
        model: step.model,
        upstreamStatus: 0,
        usage: { ...metered.usage },
        cost: metered.cost,
        latencyMs: 0,
        firstByteMs: 0,
        responseId: "",
        estimated: metered.estimated,
        usageEstimate: metered.usageEstimate,
        usageProblem: metered.usageProblem,
        unknownPrice: metered.unknownPrice,
      },
      reason: FailureReason.FAILURE_REASON_GATEWAY_ERROR,
      errorType: "gateway_lost",
      errorCode: "",
      errorMessage: `The gateway handling this call (${step.gateway}) stopped before its outcome was recorded; it is charged from Holdfast's estimate.`,
    };
  }
}
