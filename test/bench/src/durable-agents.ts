// The agents bench:durable deploys (from the bench process) and serves (from its worker
// processes, durable-worker.ts): both import them from here, so name and version agree.
// What a worker does that the bench must time is written to its stdout as one JSON line
// (see `mark`), stamped with this machine's wall clock at sub-millisecond precision.
import { existsSync } from "node:fs";
import { agent, NonRetriable } from "@holdfast/sdk";

/** Wall-clock milliseconds since the epoch, to the microsecond: comparable across processes of one machine. */
export function wallMs(): number {
  return performance.timeOrigin + performance.now();
}

/** One line on stdout for the bench to read (stdout is a pipe: written synchronously on Linux). */
export function mark(fields: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify({ ...fields, at: wallMs() })}\n`);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** `n` trivial steps; says how long they took from inside the run (the worker's side). */
export const checkpoints = agent<{ n: number }, { loopMs: number; ran: number; reused: number }>(
  { name: "bench-checkpoints", version: "bench-1" },
  async (run, input) => {
    const started = performance.now();
    for (let i = 0; i < input.n; i++) await run.step("s", () => i);
    return { loopMs: performance.now() - started, ...run.stats };
  },
);

/**
 * `n` trivial steps, then one that raises NonRetriable until `fixFile` exists: run once it
 * fails there; re-driven once the file is written, it reuses the `n` and runs the last.
 * Says how long the `n` took inside the run (reused: the SDK's lookups alone) and the last.
 */
export const reuse = agent<
  { n: number; fixFile: string },
  { loopMs: number; lastMs: number; ran: number; reused: number }
>({ name: "bench-reuse", version: "bench-1" }, async (run, input) => {
  const started = performance.now();
  for (let i = 0; i < input.n; i++) await run.step("s", () => i);
  const loopMs = performance.now() - started;
  mark({ type: "loop", runId: run.id, loopMs, ...run.stats });
  const last = performance.now();
  await run.step(
    "last",
    () => {
      if (!existsSync(input.fixFile)) throw new NonRetriable("not fixed yet");
      return "fixed";
    },
    { retries: 0 },
  );
  return { loopMs, lastMs: performance.now() - last, ...run.stats };
});

/** One step that says (on stdout) when it began: submit-to-first-step. */
export const ping = agent<Record<string, never>, number>(
  { name: "bench-ping", version: "bench-1" },
  async (run) =>
    run.step("first", () => {
      const at = wallMs();
      mark({ type: "first-step", runId: run.id });
      return at;
    }),
);

/** `pages` steps of `stepMs` each; with `marks`, each step says on stdout when it began and where. */
export const pages = agent<{ pages: number; stepMs: number; marks: boolean }, number>(
  { name: "bench-pages", version: "bench-1" },
  async (run, input) => {
    let sum = 0;
    for (let page = 1; page <= input.pages; page++) {
      sum += await run.step("page", async () => {
        if (input.marks) mark({ type: "step", runId: run.id, page, worker: process.env.NAME ?? "" });
        await sleep(input.stepMs);
        return page;
      });
    }
    return sum;
  },
);

/** One step that sleeps `ms` (an item that waits on something slow). */
export const sleeper = agent<{ ms: number }, string>(
  { name: "bench-sleeper", version: "bench-1" },
  async (run, input) =>
    run.step("sleep", async () => {
      await sleep(input.ms);
      return "slept";
    }),
);

export const BENCH_AGENTS = [checkpoints, reuse, ping, pages, sleeper] as const;
