import { setTimeout as sleep } from "node:timers/promises";
import { WaitForTimeoutError } from "./errors.js";

export interface WaitForOptions {
  /** Generous by default: this bounds a hang, it does not assert a latency. */
  readonly timeoutMs?: number;
  readonly intervalMs?: number;
  /** What was awaited, in words, for the timeout error. */
  readonly message?: string;
}

/**
 * Polls `check` until it returns something truthy and returns that, for state that becomes
 * true eventually (a projection caught up, a consumer saw a message). A throwing check is
 * retried too; its last error is in the timeout message.
 */
export async function waitFor<T>(
  check: () => T | Promise<T>,
  options: WaitForOptions = {},
): Promise<Exclude<T, false | null | undefined | 0 | "">> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const intervalMs = options.intervalMs ?? 50;
  const deadline = Date.now() + timeoutMs;
  let last: string;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as Exclude<T, false | null | undefined | 0 | "">;
      last = `last result: ${String(value)}`;
    } catch (error) {
      last = `last error: ${error instanceof Error ? error.message : String(error)}`;
    }
    if (Date.now() >= deadline) {
      throw new WaitForTimeoutError(
        `Timed out after ${timeoutMs} ms waiting for ${options.message ?? "a condition"} (${last})`,
      );
    }
    await sleep(intervalMs);
  }
}
