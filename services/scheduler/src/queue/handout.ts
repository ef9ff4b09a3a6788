import { decide as decideWindow, type KeyWindows, type Need } from "@holdfast/predict";
import type { Prediction } from "@holdfast/proto";
import type { CapBook } from "./caps.js";
import { capKeyOf, type Queued, type WorkerLink } from "./state.js";

// Which queued run a worker takes next: pure of the queues, the caps, the windows and the
// clock's reading, so handing out is one function the scheduler calls.

/**
 * What each agent's next step is likely to take of its provider key's window, from the
 * prediction its last model call carried (StepStarted): a run is not started into a window
 * that cannot take its first call (it would only wait there, holding a worker).
 */
export class NextSteps {
  private readonly needs = new Map<string, { keyId: string; need: Need; floor: Need }>();

  constructor(private readonly windows: KeyWindows) {}

  /** A model call of one of the agent's runs started, with this prediction. */
  heard(agent: string, prediction: Prediction): void {
    if (prediction.keyId === "") return;
    // The estimate with its margin (k·σ), as the gateway will ask the window for it.
    const margin = Math.max(0, Number(prediction.k) * Number(prediction.sigma));
    this.needs.set(agent, {
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

  /**
   * When the agent's provider key's window fits its next step, if not now. Undefined when
   * it fits, or nothing is known of the agent's key.
   */
  windowAt(agent: string, nowMs: number): number | undefined {
    const known = this.needs.get(agent);
    if (known === undefined) return undefined;
    const window = this.windows.get(known.keyId);
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
}

/**
 * The first run this worker may take now, in queue order (runs that ran before first);
 * or when to look again for one held back by a lease not yet recordable, a cap or a window.
 */
export function pick(input: {
  /** Runs queued again after running, then fresh ones. */
  readonly lists: readonly ReadonlyMap<string, Queued>[];
  readonly link: WorkerLink;
  /** Runs the worker still holds a slot for (running, or told to let go and not yet done). */
  readonly busy: ReadonlySet<string> | undefined;
  readonly caps: Pick<CapBook, "check">;
  readonly nextSteps: Pick<NextSteps, "windowAt">;
  readonly nowMs: number;
}): { queued?: Queued; retryAtMs?: number } {
  const { link, caps, nextSteps, nowMs } = input;
  let retryAtMs: number | undefined;
  for (const list of input.lists) {
    for (const queued of list.values()) {
      if (queued.held || !link.serves.has(`${queued.agent}\u0000${queued.version}`)) continue;
      // Not to a worker still running it under an earlier lease (its code has not let go).
      if (input.busy?.has(queued.runId)) continue;
      if (queued.notBeforeMs > nowMs) {
        retryAtMs = Math.min(retryAtMs ?? queued.notBeforeMs, queued.notBeforeMs);
        continue;
      }
      const cap = caps.check(capKeyOf(queued), queued.caps, queued.firstStart, nowMs);
      if (!cap.allowed) {
        if (cap.retryAtMs !== undefined) retryAtMs = Math.min(retryAtMs ?? cap.retryAtMs, cap.retryAtMs);
        continue;
      }
      const windowAtMs = nextSteps.windowAt(queued.agent, nowMs);
      if (windowAtMs !== undefined) {
        retryAtMs = Math.min(retryAtMs ?? windowAtMs, windowAtMs);
        continue;
      }
      return { queued };
    }
  }
  return retryAtMs === undefined ? {} : { retryAtMs };
}
