// pnpm bench:gate — what the tool-call gate costs a call it does not hold.
//
// One run starts the fake provider and `holdfast up` (nats-server, projector, gateway),
// then two more gateway processes on the same log: one with no gate configured, one with
// tool_gate rules (globs and an argument regex) and loop detection. The same load goes to
// the provider directly and to each gateway, in alternating rounds (each gateway first in
// every other round) so drift on the machine falls on both alike, at 1 and 32
// connections, for answers with no tool call (the common case: the gate must cost
// nothing) and for answers with a tool call no rule names (the rules and the loop count
// are evaluated, nothing is held). Prints the added p50/p99
// over direct for each side and the difference. Answers that are held wait for a person;
// their latency is not the gateway's.
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { type PhaseResult, percentile, runPhase, type ShapeLoad, sleep } from "./load.js";
import { startExtraGateway, startProvider, startUp } from "./processes.js";

const PHASE_MS = Number(process.env.BENCH_PHASE_MS ?? 3_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);

const chat = (name: string, messages: unknown[], tools?: unknown[]): ShapeLoad => ({
  name,
  path: "/v1/chat/completions",
  headers: { authorization: "Bearer sk-bench" },
  body: (stream) => JSON.stringify({ model: "gpt-4o-mini", stream, messages, ...(tools ? { tools } : {}) }),
});

const LOADS: readonly ShapeLoad[] = [
  chat("no tool call", [
    { role: "system", content: "You are a benchmark." },
    { role: "user", content: "Reply with a short sentence about throughput." },
  ]),
  chat(
    "an ungated tool call",
    [{ role: "user", content: '[[call:lookup {"q":"throughput","page":1}]]' }],
    [{ type: "function", function: { name: "lookup", parameters: { type: "object" } } }],
  ),
];

// What a demanding deployment gates: destructive tools by glob, mail by recipient, every
// payment; and loops (high enough that the benchmark's repeated call is never held).
const GATE_CONFIG = [
  "tool_gate:",
  "  deny:",
  '    - "delete_*"',
  '    - "drop_*"',
  '    - { name: "send_email", args: "@(?!example\\\\.com)" }',
  '    - { name: "pay*" }',
  "max_repeated_tool_calls: 1000000000",
].join("\n");

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "holdfast-bench-gate-"));
  const children: ChildProcess[] = [];
  try {
    const providerUrl = await startProvider(children);
    const { file: stack } = await startUp({ dataDir, providerUrl }, children);
    const gateFile = join(dataDir, "gate.yaml");
    writeFileSync(gateFile, GATE_CONFIG);
    const off = await startExtraGateway(
      { dataDir, natsUrl: stack.natsUrl, providerUrl, instanceId: "bench-gate-off" },
      children,
    );
    const on = await startExtraGateway(
      { dataDir, natsUrl: stack.natsUrl, providerUrl, instanceId: "bench-gate-on", configFile: gateFile },
      children,
    );
    console.log(
      `Holdfast gate benchmark — ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}`,
    );
    console.log(`${ROUNDS} alternating rounds of ${PHASE_MS / 1000} s per side; chat, non-streaming\n`);
    // Every process warmed up (JIT, connection pools, the projector's first batches) before
    // anything is measured.
    for (const origin of [providerUrl, off.url, on.url]) {
      for (const shape of LOADS) {
        await runPhase({
          origin,
          shape,
          stream: false,
          concurrency: 8,
          warmupMs: 0,
          measureMs: 1_500,
          runOf: (i) => `gate-warmup-${i % 16}`,
        });
      }
    }
    for (const shape of LOADS) {
      for (const concurrency of [1, 32]) {
        const sides = { direct: providerUrl, off: off.url, on: on.url } as const;
        const results: Record<keyof typeof sides, PhaseResult[]> = { direct: [], off: [], on: [] };
        for (let round = 0; round < ROUNDS; round++) {
          // Each gateway goes first in every other round: what follows a phase (the
          // projector catching up with it) falls on both alike.
          const order: (keyof typeof sides)[] =
            round % 2 === 0 ? ["direct", "off", "on"] : ["direct", "on", "off"];
          for (const side of order) {
            results[side].push(
              await runPhase({
                origin: sides[side],
                shape,
                stream: false,
                concurrency,
                warmupMs: 500,
                measureMs: PHASE_MS,
                // Runs of their own per side and load: no run is shared between gateways.
                runOf: (i) => `gate-${side}-${shape.name.replaceAll(" ", "-")}-${concurrency}-${i % 64}`,
              }),
            );
          }
        }
        const direct = merged(results.direct);
        const gateOff = merged(results.off);
        const gateOn = merged(results.on);
        const added = (r: Merged, q: number) => percentile(r.latencies, q) - percentile(direct.latencies, q);
        console.log(
          `${shape.name}, c=${concurrency}: direct p50 ${percentile(direct.latencies, 50).toFixed(2)} ms` +
            `\n  no gate   added p50 ${added(gateOff, 50).toFixed(2)} ms  p99 ${added(gateOff, 99).toFixed(2)} ms  ${gateOff.rate.toFixed(0)} req/s  errors ${gateOff.errors}` +
            `\n  gate on   added p50 ${added(gateOn, 50).toFixed(2)} ms  p99 ${added(gateOn, 99).toFixed(2)} ms  ${gateOn.rate.toFixed(0)} req/s  errors ${gateOn.errors}` +
            `\n  on − off  p50 ${(added(gateOn, 50) - added(gateOff, 50)).toFixed(2)} ms (added x${(added(gateOn, 50) / added(gateOff, 50)).toFixed(2)})` +
            `  req/s x${(gateOn.rate / gateOff.rate).toFixed(2)}\n`,
        );
      }
    }
  } finally {
    for (const child of children.reverse()) child.kill("SIGINT");
    await sleep(2_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

interface Merged {
  latencies: Float64Array;
  rate: number;
  errors: number;
}

/** The rounds of one side as one sample: every latency, the mean rate, all errors. */
function merged(rounds: readonly PhaseResult[]): Merged {
  const latencies = Float64Array.from(rounds.flatMap((r) => [...r.latencies])).sort();
  const requests = rounds.reduce((sum, r) => sum + r.requests, 0);
  const seconds = rounds.reduce((sum, r) => sum + r.seconds, 0);
  return { latencies, rate: requests / seconds, errors: rounds.reduce((sum, r) => sum + r.errors, 0) };
}

await main();
