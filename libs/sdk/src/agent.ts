import { createHash } from "node:crypto";
import type { Run } from "./run.js";

export interface AgentOptions {
  /** The agent's name: letters, digits, ".", "_", "-". */
  readonly name: string;
  /**
   * The version its runs go by. A re-drive runs a run again on its own version (reusing its
   * recorded steps); a replay moves it to the latest deployed. Default: a hash of the
   * agent's function and options, so changed code is a new version.
   */
  readonly version?: string;
  /** Wall clock a run may take (held or waiting for a provider's window not counted); default 30 min, at most 24 h. */
  readonly maxDurationSeconds?: number;
  /** At most this many of one tenant's runs with the same partition key run at once. */
  readonly concurrencyPerKey?: number;
  /** At most this many starts per tenant and partition key: "30/min", "1/sec" (= 60 a minute). */
  readonly rateLimit?: string;
}

/** What an agent does with one run: its input in, its output (any JSON value) out. */
export type AgentFunction<Input, Output> = (run: Run, input: Input) => Promise<Output> | Output;

/** An agent: its options and code, served by `worker()` and registered by `holdfast deploy`. */
export interface Agent<Input = unknown, Output = unknown> {
  readonly kind: "holdfast.agent";
  readonly name: string;
  readonly version: string;
  readonly options: AgentOptions;
  readonly run: AgentFunction<Input, Output>;
}

/**
 * Declares an agent. Its code runs on workers, one run at a time per slot; wrap each model
 * call and each tool call in `run.step(label, fn)` so a failure costs that step, not the run.
 *
 * ```ts
 * export const research = agent({ name: "research", concurrencyPerKey: 2, rateLimit: "30/min" },
 *   async (run, task: { question: string }) => {
 *     const openai = await run.openai();
 *     const reply = await run.step("model", () => openai.chat.completions.create({ ... }));
 *     ...
 *   });
 * ```
 */
export function agent<Input = unknown, Output = unknown>(
  options: AgentOptions,
  fn: AgentFunction<Input, Output>,
): Agent<Input, Output> {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(options.name)) {
    throw new TypeError(
      `agent name ${JSON.stringify(options.name)} must be 1 to 128 letters, digits, ".", "_" or "-", starting with a letter or digit`,
    );
  }
  const version =
    options.version ??
    createHash("sha256")
      .update(fn.toString())
      .update(JSON.stringify({ ...options, version: undefined }))
      .digest("hex")
      .slice(0, 12);
  return Object.freeze({ kind: "holdfast.agent", name: options.name, version, options, run: fn });
}

/** Whether `value` is an agent made by `agent()` (what `holdfast deploy` and `holdfast worker` look for in a module). */
export function isAgent(value: unknown): value is Agent {
  return (
    typeof value === "object" && value !== null && (value as { kind?: unknown }).kind === "holdfast.agent"
  );
}
