// A worker process for bench:durable, as an agent's team would run one: it serves the
// agents of durable-agents.ts and writes what it does to stdout, one JSON line each
// ({"type":"ready"} once connected, then started / finished / revoked / disconnected
// and the agents' own marks), each stamped with the wall clock (`at`, ms, sub-ms precision).
//
//   SCHEDULER=host:port [NAME=w1] [SLOTS=1] node durable-worker.js
import { worker } from "@holdfast/sdk";
import { BENCH_AGENTS, mark } from "./durable-agents.js";

const name = process.env.NAME ?? `bench-worker-${process.pid}`;
await worker({
  agents: BENCH_AGENTS,
  scheduler: process.env.SCHEDULER ?? "127.0.0.1:4144",
  name,
  slots: Number(process.env.SLOTS ?? 1),
  onEvent: (event) => mark({ ...event, worker: name }),
});
mark({ type: "ready", worker: name });
