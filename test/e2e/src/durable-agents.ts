// The agents the durable-run tests' worker processes serve (durable-worker.ts); the tests
// deploy them from here. Each step they run is written to EXECUTIONS (one line per
// execution), so a test can count what ran where, even across a worker killed mid-step.
import { appendFileSync } from "node:fs";
import { agent } from "@holdfast/sdk";

const executions = process.env.EXECUTIONS ?? "";
const stepMs = Number(process.env.STEP_MS ?? 50);
const ran = (line: string) => {
  if (executions !== "") appendFileSync(executions, `${line}\n`);
};

/** Pages processed one step each, every one taking STEP_MS. */
export const pages = agent<{ pages: number }, { sum: number }>(
  { name: "pages", version: "v1" },
  async (run, input) => {
    let sum = 0;
    for (let page = 1; page <= input.pages; page++) {
      sum += await run.step("page", async () => {
        ran(`${run.id} page#${page} ${process.env.NAME ?? ""}`);
        await new Promise((resolve) => setTimeout(resolve, stepMs));
        return page;
      });
    }
    return { sum };
  },
);

/** One step that holds the event loop for `ms`. */
export const blocker = agent<{ ms: number }, string>(
  { name: "blocker", version: "v1" },
  async (run, input) => {
    await run.step("warm-up", () => "ok");
    return run.step("block", () => {
      ran(`${run.id} block ${process.env.NAME ?? ""}`);
      const until = Date.now() + input.ms;
      while (Date.now() < until) {
        // A CPU-bound step: nothing else runs on this thread meanwhile.
      }
      return "done";
    });
  },
);
