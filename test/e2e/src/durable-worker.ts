// A worker process for the durable-run tests, as an agent's team would run one: it serves
// the agents of durable-agents.ts and prints "worker ready" once connected.
//
//   SCHEDULER=host:port EXECUTIONS=file [NAME=w1] [STEP_MS=50] [GRACE_MS=10000] node durable-worker.js
import { worker } from "@holdfast/sdk";
import { blocker, pages } from "./durable-agents.js";

await worker({
  agents: [pages, blocker],
  scheduler: process.env.SCHEDULER ?? "127.0.0.1:4144",
  name: process.env.NAME ?? `test-worker-${process.pid}`,
  killBlockedAfterMs: Number(process.env.GRACE_MS ?? 10_000),
});
console.log("worker ready");
