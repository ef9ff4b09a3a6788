import { type ConcurrencyLimit, ConcurrencyLimits } from "@holdfast/predict";
import type { Call, UpstreamAnswer } from "../pipeline/hooks.js";
import type { Key } from "./key.js";

/**
 * The calls at once of the keys whose answers carry no reading of their window (an
 * OpenAI-compatible server or a gateway that sends no rate-limit headers): with nothing to
 * predict from, such a key is given as many calls at once as its 429s and successes say
 * (libs/predict's ConcurrencyLimit, AIMD). A key that reports its window is predicted from
 * it and takes no slot.
 *
 * A call takes its slot when prediction lets it go on and holds it until it ends (answered,
 * refused, its client gone), across the retries of a 429 too: a call waiting its
 * retry-after is one of those sent again together when the cooldown ends, which is what
 * the limit bounds. It gives it back while its run is held (parked), and takes one again
 * when it is decided anew.
 */
export class Slots {
  private readonly limits = new ConcurrencyLimits();
  // The limit each call holds a slot of (or waits in), to give it back however the call ends.
  private readonly held = new WeakMap<Call, ConcurrencyLimit>();

  /** Whether the key is kept to a number of calls at once: nothing it answered said anything of its window. */
  governs(key: Key): boolean {
    return key.window.known().length === 0;
  }

  /**
   * The call's slot on its key: true when it holds one now (or the key is not governed);
   * otherwise the promise of its turn (higher priority first, first come first served within
   * one), after which it holds it.
   */
  take(call: Call, key: Key, priority: number): true | Promise<void> {
    const limit = this.limits.of(key.keyId);
    const before = this.held.get(call);
    // Moved to another key (a route), or to one that now reports its window: what it held goes back.
    if (before !== undefined && before !== limit) this.giveBack(call);
    if (!this.governs(key)) {
      this.giveBack(call);
      return true;
    }
    this.held.set(call, limit);
    return limit.acquire(call, priority);
  }

  /** The call's slot, or its place in the queue, goes back (it ended, parked, or stopped waiting). */
  giveBack(call: Call): void {
    const limit = this.held.get(call);
    if (limit === undefined) return;
    this.held.delete(call);
    limit.release(call);
  }

  /**
   * An answer on a governed key teaches its limit: a 429 lowers it (at most once per the
   * cooldown it asked for, which the key's window took in first), a success raises it.
   */
  answered(key: Key, answer: UpstreamAnswer, nowMs: number): void {
    if (!this.governs(key)) return;
    const limit = this.limits.get(key.keyId);
    if (limit === undefined) return;
    if (answer.statusCode === 429) {
      const coolingUntil = key.window.coolingUntil(nowMs);
      limit.refused({
        nowMs,
        sentAtMs: answer.sentAtMs,
        ...(coolingUntil === 0 ? {} : { retryAfterMs: coolingUntil - nowMs }),
      });
    } else if (answer.statusCode >= 200 && answer.statusCode < 300) {
      limit.succeeded();
    }
  }

  /** The key's limit of calls at once (Infinity until its first 429), for logs and tests. */
  limitOf(keyId: string): number {
    return this.limits.get(keyId)?.limit ?? Number.POSITIVE_INFINITY;
  }
}
