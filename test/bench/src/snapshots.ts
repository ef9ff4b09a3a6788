// pnpm bench:snapshots — what keeping every step's request and answer costs, and what it
// stores.
//
// One run starts the fake provider and `holdfast up`, then two more gateway processes on
// the same log: one with snapshots off, one with them on (the default). An agent holds a
// conversation of STEPS steps (each step adds a question of ~QUESTION_BYTES and the
// model's answer), one call at a time (c=1), through each gateway and straight to the
// provider, in alternating rounds, so drift on the machine falls on every side alike.
//
// Printed, each beside its baseline from the same run:
// - the added p50 per call over the provider's own, snapshots on against off, and the CPU
//   per call of the gateway process and of the whole stack (every process `up` started,
//   nats-server included);
// - the bytes the two snapshot buckets hold for one STEPS-step conversation, against the
//   sum of its raw requests and answers and against its unique content (the last
//   request, which holds every question and answer, plus every answer);
// - how long reading step STEPS back takes: the control API's GET runs/:id/steps/:n
//   (p50 over repeated reads, each a fresh read of every piece) and `holdfast show <run>
//   <step> --raw` as a command (a Node.js process starting included);
// - how long `holdfast export` takes for that run, and the bundle's size.
//
// BENCH_STEPS (200), BENCH_ROUNDS (4), BENCH_QUESTION_BYTES (2,000: a tool result of a few
// hundred tokens, as an agent step carries) change the run.
import { type ChildProcess, execFile } from "node:child_process";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { connectBus } from "@holdfast/bus";
import { Pool } from "undici";
import { CpuMeter, childrenOf } from "./cpu.js";
import { percentile, sleep } from "./load.js";
import { ROOT, readerHeaders, startExtraGateway, startProvider, startUp } from "./processes.js";

const STEPS = Number(process.env.BENCH_STEPS ?? 200);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const QUESTION_BYTES = Number(process.env.BENCH_QUESTION_BYTES ?? 2_000);
const run = promisify(execFile);

type Side = "direct" | "off" | "on";

interface Conversation {
  /** Each call's whole time, ms, in order. */
  latencies: number[];
  requestBytes: number[];
  answerBytes: number[];
  lastRequest: string;
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "holdfast-bench-snapshots-"));
  const children: ChildProcess[] = [];
  try {
    const providerUrl = await startProvider(children);
    const { up, file: stack } = await startUp({ dataDir, providerUrl }, children);
    const offFile = join(dataDir, "snapshots-off.yaml");
    writeFileSync(offFile, "snapshots:\n  enabled: false\n");
    const off = await startExtraGateway(
      { dataDir, natsUrl: stack.natsUrl, providerUrl, instanceId: "bench-snap-off", configFile: offFile },
      children,
    );
    const on = await startExtraGateway(
      { dataDir, natsUrl: stack.natsUrl, providerUrl, instanceId: "bench-snap-on" },
      children,
    );
    // Every process `up` runs (nats-server, projector, budget, control, scheduler, its own
    // gateway, idle here) plus the gateway measured: the stack's CPU.
    const stackPids = [up.pid!, ...childrenOf(up.pid!).map((c) => c.pid)];
    const gatewayPid = { off: off.child.pid!, on: on.child.pid! };
    const origins: Record<Side, string> = { direct: providerUrl, off: off.url, on: on.url };
    console.log(
      `Holdfast snapshot benchmark — ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}`,
    );
    console.log(
      `a ${STEPS}-step conversation at c=1 (questions of ~${QUESTION_BYTES} bytes), ${ROUNDS} alternating rounds per side\n`,
    );
    // Warm every process (JIT, pools, the projector's first batches). The warm-up through
    // `on` is stored too: it counts in what the buckets are measured against.
    let warmOn: Conversation | undefined;
    for (const side of ["direct", "off", "on"] as const) {
      const warm = await converse(origins[side], `warm-${side}`, 30);
      if (side === "on") warmOn = warm;
    }

    const results: Record<Side, Conversation[]> = { direct: [], off: [], on: [] };
    const cpu: Record<"off" | "on", { gateway: number; stack: number; calls: number }> = {
      off: { gateway: 0, stack: 0, calls: 0 },
      on: { gateway: 0, stack: 0, calls: 0 },
    };
    for (let round = 0; round < ROUNDS; round++) {
      const order: Side[] = round % 2 === 0 ? ["direct", "off", "on"] : ["direct", "on", "off"];
      for (const side of order) {
        const meter = side === "direct" ? undefined : new CpuMeter([...stackPids, gatewayPid[side]]);
        meter?.start();
        results[side].push(await converse(origins[side], `snap-${side}-${round}`, STEPS));
        // The projector and nats-server finish what the round wrote before the next starts.
        await sleep(500);
        meter?.stop();
        if (side !== "direct" && meter !== undefined) {
          cpu[side].gateway += meter.ms(gatewayPid[side]);
          cpu[side].stack += meter.ms();
          cpu[side].calls += STEPS;
        }
      }
    }
    const p50 = (side: Side) =>
      percentile(Float64Array.from(results[side].flatMap((r) => r.latencies)).sort(), 50);
    const direct = p50("direct");
    const added = { off: p50("off") - direct, on: p50("on") - direct };
    const per = (side: "off" | "on", what: "gateway" | "stack") => cpu[side][what] / cpu[side].calls;
    console.log(`c=1, a call of a growing conversation: provider p50 ${direct.toFixed(2)} ms`);
    console.log(
      `  added p50     off ${added.off.toFixed(2)} ms   on ${added.on.toFixed(2)} ms   (on/off x${(added.on / added.off).toFixed(2)}, goal ≤ x1.10)`,
    );
    for (const what of ["gateway", "stack"] as const) {
      console.log(
        `  ${what === "gateway" ? "gateway CPU" : "stack CPU  "}   off ${per("off", what).toFixed(2)} ms   on ${per("on", what).toFixed(2)} ms a call   (on/off x${(per("on", what) / per("off", what)).toFixed(2)}, goal ≤ x1.10)`,
      );
    }

    // What one conversation stored: the last round's on the snapshotting gateway, alone in
    // the buckets (every other conversation went through `off`, `direct`, or warmed `on`).
    const bus = await connectBus({
      servers: stack.natsUrl,
      prefix: "hf",
      name: "bench-snapshots",
      credentials: join(dataDir, "credentials", "nats-reader.nk"),
      principal: "reader",
    });
    try {
      const sizes = await Promise.all([bus.bucketSize("SNAPSHOT_PARTS"), bus.bucketSize("SNAPSHOT_STEPS")]);
      const stored = sizes[0].bytes + sizes[1].bytes;
      const all = [...results.on, warmOn!];
      const raw = sum(all.flatMap((c) => [...c.requestBytes, ...c.answerBytes]));
      const unique = sum(all.map((c) => Buffer.byteLength(c.lastRequest) + sum(c.answerBytes)));
      console.log(
        `\nstorage, ${results.on.length} conversations of ${STEPS} steps (and a ${30}-step warm-up): ` +
          `${mib(stored)} in the buckets (${sizes[0].values} pieces, ${sizes[1].values} manifests)` +
          `\n  raw requests and answers ${mib(raw)} (stored / raw x${(stored / raw).toFixed(3)})` +
          `\n  unique content ${mib(unique)} (stored / unique x${(stored / unique).toFixed(2)}, goal ≤ x1.2)`,
      );
    } finally {
      await bus.close();
    }

    // Reading it back: the last conversation's last step.
    const runId = `snap-on-${ROUNDS - 1}`;
    const control = new Pool(stack.controlUrl, { connections: 1 });
    const times: number[] = [];
    for (let i = 0; i < 20; i++) {
      const start = performance.now();
      const response = await control.request({
        path: `/holdfast/v1/runs/${runId}/steps/${STEPS}`,
        method: "GET",
        headers: readerHeaders(dataDir),
      });
      const body = await response.body.text();
      if (response.statusCode !== 200) throw new Error(`GET step ${STEPS}: ${response.statusCode} ${body}`);
      times.push(performance.now() - start);
    }
    await control.close();
    const bin = join(ROOT, "libs/cli/dist/bin.js");
    const cli: number[] = [];
    for (let i = 0; i < 5; i++) {
      const start = performance.now();
      await run(process.execPath, [bin, "show", runId, String(STEPS), "--raw", "--data-dir", dataDir]);
      cli.push(performance.now() - start);
    }
    const nodeStart = performance.now();
    await run(process.execPath, ["-e", "0"]);
    const version = performance.now() - nodeStart;
    console.log(
      `\nshow step ${STEPS}: GET runs/:id/steps/${STEPS} p50 ${percentile(Float64Array.from(times).sort(), 50).toFixed(1)} ms (goal < 50 ms)` +
        `; holdfast show ${STEPS} --raw as a command p50 ${percentile(Float64Array.from(cli).sort(), 50).toFixed(0)} ms (node -e 0 alone: ${version.toFixed(0)} ms)`,
    );
    const bundle = join(dataDir, "run.json");
    const exportStart = performance.now();
    await run(process.execPath, [bin, "export", runId, "-o", bundle, "--data-dir", dataDir]);
    console.log(
      `export of the ${STEPS}-step run: ${(performance.now() - exportStart).toFixed(0)} ms as a command, bundle ${mib(statSync(bundle).size)}`,
    );
  } finally {
    for (const child of children.reverse()) child.kill("SIGINT");
    await sleep(2_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** One agent's conversation, a call at a time, each carrying every question and answer so far. */
async function converse(origin: string, runId: string, steps: number): Promise<Conversation> {
  const pool = new Pool(origin, { connections: 1 });
  const messages: { role: string; content: string }[] = [
    { role: "system", content: "You are a careful research agent. ".repeat(20) },
  ];
  const result: Conversation = { latencies: [], requestBytes: [], answerBytes: [], lastRequest: "" };
  try {
    for (let step = 1; step <= steps; step++) {
      messages.push({
        role: "user",
        content: `Step ${step} of ${runId}: ${"here is what the tool returned. ".repeat(Math.ceil(QUESTION_BYTES / 33))}`,
      });
      const body = JSON.stringify({ model: "gpt-4o-mini", max_tokens: 50, messages });
      const start = performance.now();
      const response = await pool.request({
        path: "/v1/chat/completions",
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: "Bearer sk-bench",
          "x-holdfast-run": runId,
        },
        body,
      });
      const text = await response.body.text();
      result.latencies.push(performance.now() - start);
      if (response.statusCode !== 200) throw new Error(`${origin}: ${response.statusCode} ${text}`);
      result.requestBytes.push(Buffer.byteLength(body));
      result.answerBytes.push(Buffer.byteLength(text));
      result.lastRequest = body;
      const answer = JSON.parse(text) as { choices: { message: { content: string } }[] };
      messages.push({ role: "assistant", content: answer.choices[0]?.message.content ?? "" });
    }
  } finally {
    await pool.close();
  }
  return result;
}

const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);
const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(2)} MiB`;

await main();
