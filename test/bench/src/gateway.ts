// pnpm bench:gateway — what the gateway adds on top of the provider, measured side by side.
//
// The stack runs as users run it (`holdfast up`: nats-server, projector with embedded
// ClickHouse, gateway, each its own process) in front of the fake provider in a process
// of its own. The same load generator then calls the provider directly and through the
// gateway, at concurrency 1, 32 and 256, and prints both with their ratios. During the
// gateway runs it also samples the event log (append rate) and the projector (lag).
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const PHASE_MS = Number(process.env.BENCH_PHASE_MS ?? 6_000);
const WARMUP_MS = 1_000;
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? "1,32,256").split(",").map(Number);
const RUNS = Number(process.env.BENCH_RUNS ?? 64);
const PROVIDER_MS = 250;

interface Phase {
  requests: number;
  errors: number;
  seconds: number;
  latencies: Float64Array;
}

const body = JSON.stringify({
  model: "gpt-4o-mini",
  messages: [
    { role: "system", content: "You are a benchmark." },
    { role: "user", content: "Reply with a short sentence about throughput." },
  ],
});

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "holdfast-bench-"));
  const children: ChildProcess[] = [];
  try {
    const provider = spawn(process.execPath, [join(ROOT, "test/fake-provider/dist/main.js"), "--port", "0"], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    children.push(provider);
    const providerUrl = await firstMatch(provider, /listening on (http:\/\/\S+)/);

    const up = spawn(
      process.execPath,
      [
        join(ROOT, "libs/cli/dist/bin.js"),
        "up",
        "--data-dir",
        dataDir,
        "--port",
        "0",
        "--upstream",
        `${providerUrl}/v1`,
      ],
      { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, HOLDFAST_LOG_LEVEL: "warn" } },
    );
    children.push(up);
    await firstMatch(up, /(Ctrl-C stops everything)/);
    const stack = JSON.parse(readFileSync(join(dataDir, "holdfast.json"), "utf8")) as {
      gatewayUrl: string;
      analyticsUrl: string;
    };

    console.log(
      `Holdfast gateway benchmark — ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}`,
    );
    console.log(
      `Each phase: ${WARMUP_MS} ms warm-up, then ${PHASE_MS} ms measured; non-streaming chat completions,`,
    );
    console.log(
      `${RUNS} runs round-robin, fake provider with no added latency (so the gateway's share is visible).\n`,
    );

    const direct = new URL(providerUrl);
    const gateway = new URL(stack.gatewayUrl);
    const rows: string[][] = [];
    const extras: string[] = [];
    for (const c of CONCURRENCY) {
      const d = await phase(direct.origin, "/v1/chat/completions", c);
      const before = await streamLastSeq(stack.analyticsUrl);
      const lag = sampleLag(stack.analyticsUrl);
      const g = await phase(gateway.origin, "/v1/chat/completions", c);
      const maxLag = lag.stop();
      const after = await streamLastSeq(stack.analyticsUrl);
      const catchUpMs = await waitCaughtUp(stack.analyticsUrl);
      rows.push(row(c, "direct", d), row(c, "gateway", g), ratioRow(d, g));
      extras.push(
        `c=${String(c).padEnd(3)}  events appended ${rate((after - before) / (g.seconds + WARMUP_MS / 1000))}/s` +
          `   projection lag max ${maxLag.events} events (${maxLag.ms} ms behind)` +
          `   caught up ${catchUpMs} ms after load stopped`,
      );
    }
    console.log(table(["conc", "target", "requests", "errors", "req/s", "p50 ms", "p99 ms"], rows));

    // The same comparison with a provider that takes as long as a short real model call.
    const slow = { "x-fake-latency-ms": String(PROVIDER_MS) };
    const ds = await phase(direct.origin, "/v1/chat/completions", 32, slow);
    const gs = await phase(gateway.origin, "/v1/chat/completions", 32, slow);
    console.log(
      `\nWith the provider answering in ${PROVIDER_MS} ms (a short real model call), concurrency 32:`,
    );
    console.log(
      table(
        ["conc", "target", "requests", "errors", "req/s", "p50 ms", "p99 ms"],
        [row(32, "direct", ds), row(32, "gateway", gs), ratioRow(ds, gs)],
      ),
    );
    console.log("\nEvent log and projection during the gateway phases (2 events per call):");
    for (const line of extras) console.log(`  ${line}`);
  } finally {
    for (const child of children.reverse()) child.kill("SIGINT");
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** Keeps `concurrency` requests in flight for the phase and records each one's latency. */
async function phase(
  origin: string,
  path: string,
  concurrency: number,
  extraHeaders: Record<string, string> = {},
): Promise<Phase> {
  const pool = new Pool(origin, { connections: concurrency, pipelining: 1 });
  const latencies: number[] = [];
  let errors = 0;
  let counter = 0;
  let measuring = false;
  let stop = false;
  const worker = async () => {
    while (!stop) {
      const i = counter++;
      const start = performance.now();
      try {
        const response = await pool.request({
          path,
          method: "POST",
          headers: {
            "content-type": "application/json",
            authorization: "Bearer sk-bench",
            "x-holdfast-run": `bench-${i % RUNS}`,
            ...extraHeaders,
          },
          body,
        });
        await response.body.text();
        if (response.statusCode !== 200) errors += 1;
      } catch {
        errors += 1;
      }
      if (measuring) latencies.push(performance.now() - start);
    }
  };
  const workers = Array.from({ length: concurrency }, worker);
  await sleep(WARMUP_MS);
  measuring = true;
  const started = performance.now();
  await sleep(PHASE_MS);
  measuring = false;
  const seconds = (performance.now() - started) / 1000;
  stop = true;
  await Promise.all(workers);
  await pool.close();
  return { requests: latencies.length, errors, seconds, latencies: Float64Array.from(latencies).sort() };
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function row(c: number, target: string, p: Phase): string[] {
  return [
    String(c),
    target,
    String(p.requests),
    String(p.errors),
    rate(p.requests / p.seconds),
    percentile(p.latencies, 50).toFixed(2),
    percentile(p.latencies, 99).toFixed(2),
  ];
}

function ratioRow(d: Phase, g: Phase): string[] {
  const x = (a: number, b: number) => `x${(a / b).toFixed(2)}`;
  const added = (p: number) => `+${(percentile(g.latencies, p) - percentile(d.latencies, p)).toFixed(2)}`;
  return [
    "",
    "gateway/direct",
    "",
    "",
    x(g.requests / g.seconds, d.requests / d.seconds),
    `${x(percentile(g.latencies, 50), percentile(d.latencies, 50))} (${added(50)})`,
    `${x(percentile(g.latencies, 99), percentile(d.latencies, 99))} (${added(99)})`,
  ];
}

async function streamLastSeq(analyticsUrl: string): Promise<number> {
  const health = (await (await fetch(`${analyticsUrl}/health`)).json()) as { stream_last_seq: number };
  return health.stream_last_seq;
}

/** Samples the projector's lag (events behind, and how old the newest projected event is). */
function sampleLag(analyticsUrl: string): { stop(): { events: number; ms: number } } {
  let events = 0;
  let ms = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        const health = (await (await fetch(`${analyticsUrl}/health`)).json()) as { lag_events: number };
        events = Math.max(events, health.lag_events);
        const [row] = await sql<{ behind: number }>(
          analyticsUrl,
          "SELECT toUnixTimestamp64Milli(now64(3)) - toUnixTimestamp64Milli(max(ts)) AS behind FROM events",
        );
        if (health.lag_events > 0) ms = Math.max(ms, row?.behind ?? 0);
      } catch {
        // The projector may be busy; try again.
      }
      await sleep(200);
    }
  })();
  return {
    stop: () => {
      running = false;
      void loop;
      return { events, ms };
    },
  };
}

async function waitCaughtUp(analyticsUrl: string): Promise<number> {
  const start = performance.now();
  for (;;) {
    const health = (await (await fetch(`${analyticsUrl}/health`)).json()) as { lag_events: number };
    if (health.lag_events === 0) return Math.round(performance.now() - start);
    await sleep(50);
  }
}

async function sql<T>(analyticsUrl: string, query: string): Promise<T[]> {
  const response = await fetch(`${analyticsUrl}/v1/query`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ sql: query }),
  });
  return ((await response.json()) as { rows: T[] }).rows;
}

function firstMatch(child: ChildProcess, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      text += chunk.toString();
      const match = pattern.exec(text);
      if (match) resolve(match[1]!);
    });
    child.once("exit", (code) =>
      reject(new Error(`process exited (${code}) before printing ${pattern}:\n${text}`)),
    );
  });
}

function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]?.length ?? 0)));
  const line = (r: string[]) =>
    r.map((cell, i) => (i < 2 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join("  ");
  return [line(headers), ...rows.map(line)].join("\n");
}

const rate = (n: number) => n.toFixed(0);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

await main();
