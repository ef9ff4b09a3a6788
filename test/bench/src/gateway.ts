// pnpm bench:gateway — what the Holdfast gateway adds on top of the provider, side by side
// with the floor (a minimal node:http + undici proxy written in ./floor.ts).
//
// One run starts the fake provider, the floor proxy and `holdfast up` (nats-server, the
// projector with embedded ClickHouse, the gateway: each its own process, as users run it)
// and drives each target with the same load generator: every API shape, streaming or
// not, at 1, 32 and 256 connections. It prints added latency (p50/p99 over calling the
// provider directly), req/s, time to first byte and CPU per call (read from /proc) for the
// floor, the gateway alone and the whole stack (gateway, nats-server, the projector, the
// budget, control and scheduler services: every process of `holdfast up`), as
// ratios to the floor; each target's figures come from rounds taken in turn with the
// others', so a drift of the machine's speed does not fall on one of them alone; then two gateways alternating on one run, a 20,000-step run, and
// the projection's lag. At 32 connections each shape is measured twice: with calls spread
// over 64 runs, and with every call on one hot run (a traceparent-identified multi-agent
// trace, or a fleet of identical fingerprinted agents). A fleet phase keeps 1,000 streaming
// calls in flight against a provider that takes 1 s and then streams 20 events 50 ms
// apart. Linux only (CPU comes from /proc).
//
//   BENCH_PHASE_MS (default 4000)  measured time per target, after a 1 s warm-up
//   BENCH_ROUNDS (4)               rounds that time is taken in
//   BENCH_CONCURRENCY (1,32,256)   BENCH_SHAPES (chat,responses,messages)
//   BENCH_STREAMS (no,yes)         BENCH_STEPS (20000): length of the long run
//   BENCH_FLEET (1000)             BENCH_FLEET_MS (20000): the fleet phase's calls in flight, measured time
//   BENCH_PARTS (shapes,fleet,alternating,long)  which parts run
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { CpuMeter, childrenOf } from "./cpu.js";
import {
  mergePhases,
  type PhaseResult,
  percentile,
  runPhase,
  SHAPE_LOADS,
  type ShapeLoad,
  sleep,
} from "./load.js";
import { firstMatch, ROOT, readerHeaders, startExtraGateway, startProvider, startUp } from "./processes.js";

const PHASE_MS = Number(process.env.BENCH_PHASE_MS ?? 4_000);
const WARMUP_MS = 1_000;
// Each target's measurement is taken in this many rounds, direct, floor and Holdfast in
// turn, so that a drift of the machine's speed (other tenants of its host) falls on all
// three alike instead of on whichever was measured during it.
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
// New connections each round: a short warm-up before each round after the first.
const ROUND_WARMUP_MS = 500;
// Before any phase, each proxy serves each shape (streaming and not) this long.
const WARMUP_PER_SHAPE_MS = 2_000;
const ALTERNATING_ROUNDS = 5;
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? "1,32,256").split(",").map(Number);
const SHAPES = (process.env.BENCH_SHAPES ?? "chat,responses,messages").split(",");
const STEPS = Number(process.env.BENCH_STEPS ?? 20_000);
const RUNS = 64;
const STREAMS = (process.env.BENCH_STREAMS ?? "no,yes").split(",").map((s) => s === "yes");
const FLEET = Number(process.env.BENCH_FLEET ?? 1_000);
const FLEET_MS = Number(process.env.BENCH_FLEET_MS ?? 20_000);
const PARTS = new Set((process.env.BENCH_PARTS ?? "shapes,fleet,alternating,long").split(","));
/** The concurrency at which each shape is measured on one hot run as well. */
const HOT_CONCURRENCY = 32;

interface Stack {
  providerUrl: string;
  floorUrl: string;
  gatewayUrl: string;
  natsUrl: string;
  analyticsUrl: string;
  pids: {
    floor: number;
    gateway: number;
    nats: number;
    projector: number;
    budget: number;
    control: number;
    scheduler: number;
  };
  children: ChildProcess[];
  dataDir: string;
}

interface Measured {
  result: PhaseResult;
  cpu: CpuMeter;
}

async function main(): Promise<void> {
  const stack = await startStack();
  const lag = new LagSampler(stack.analyticsUrl, readerHeaders(stack.dataDir));
  try {
    console.log(
      `Holdfast gateway benchmark — ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}`,
    );
    console.log(
      `Each proxy first serves every shape for ${WARMUP_PER_SHAPE_MS} ms at 8 connections (not measured); then per phase`,
    );
    console.log(
      `${PHASE_MS} ms measured, in ${ROUNDS} rounds taking direct, floor and Holdfast in turn (a warm-up of ${WARMUP_MS} ms`,
    );
    console.log(
      `before the first round, ${ROUND_WARMUP_MS} ms before each other); fake provider with no added latency, so what`,
    );
    console.log(
      "the proxies add is visible; load generator, provider and every proxy share this machine's CPUs.\n",
    );
    // Every proxy serves each shape for a while before anything is measured: what is
    // measured is a process in its steady state (its code compiled and optimized), not
    // its first second.
    await warmUp(stack);
    const summary: Row[] = [];
    if (PARTS.has("shapes")) {
      for (const shape of SHAPE_LOADS.filter((s) => SHAPES.includes(s.name))) {
        for (const stream of STREAMS) {
          for (const concurrency of CONCURRENCY) {
            for (const runs of concurrency === HOT_CONCURRENCY
              ? (["many", "one"] as const)
              : (["many"] as const)) {
              const row = await compare(stack, lag, shape, stream, concurrency, runs);
              summary.push(row);
              console.log(formatRow(row));
            }
          }
        }
      }
      console.log(`\n${legend()}`);
      console.log(`\nProjection lag while Holdfast was under load: ${lag.report()}`);
    }
    const fleet = PARTS.has("fleet") ? await fleetPhase(stack) : undefined;
    console.log(`\n${targets(summary, fleet)}`);
    if (PARTS.has("alternating")) await alternating(stack);
    if (PARTS.has("long")) await longRun(stack);
  } finally {
    lag.stop();
    for (const child of stack.children.reverse()) child.kill("SIGINT");
    await sleep(2_000);
    rmSync(stack.dataDir, { recursive: true, force: true });
  }
}

interface Row {
  shape: string;
  stream: boolean;
  concurrency: number;
  /** Calls spread over 64 runs, or every call on one hot run. */
  runs: "many" | "one";
  direct: PhaseResult;
  floor: Measured;
  holdfast: Measured;
  /** Each round's figures, floor and Holdfast (a stall shows in one round's p99). */
  rounds: { floor: PhaseResult; holdfast: PhaseResult }[];
  pids: Stack["pids"];
}

async function compare(
  stack: Stack,
  lag: LagSampler,
  shape: ShapeLoad,
  stream: boolean,
  concurrency: number,
  runs: "many" | "one",
): Promise<Row> {
  const hot = `bench-hot-${shape.name}-${stream ? "stream" : "whole"}-${Date.now()}`;
  const base = {
    shape,
    stream,
    concurrency,
    measureMs: PHASE_MS / ROUNDS,
    runOf: runs === "one" ? () => hot : (i: number) => `bench-${shape.name}-${i % RUNS}`,
  };
  const floorCpu = new CpuMeter([stack.pids.floor]);
  const { gateway, nats, projector, budget, control, scheduler } = stack.pids;
  const holdfastCpu = new CpuMeter([gateway, nats, projector, budget, control, scheduler]);
  const phases = {
    direct: () => ({ origin: stack.providerUrl }),
    floor: () => ({
      origin: stack.floorUrl,
      onMeasure: (at: "start" | "stop") => (at === "start" ? floorCpu.start() : floorCpu.stop()),
    }),
    holdfast: () => ({
      origin: stack.gatewayUrl,
      onMeasure: (at: "start" | "stop") => {
        if (at === "start") {
          holdfastCpu.start();
          lag.measuring = true;
        } else {
          holdfastCpu.stop();
          lag.measuring = false;
        }
      },
    }),
  };
  const results = { direct: [] as PhaseResult[], floor: [] as PhaseResult[], holdfast: [] as PhaseResult[] };
  for (let round = 0; round < ROUNDS; round++) {
    // Every other round in the opposite order: none is always measured first or last.
    const order = (["direct", "floor", "holdfast"] as const).slice();
    if (round % 2 === 1) order.reverse();
    for (const target of order) {
      results[target].push(
        await runPhase({ ...base, ...phases[target](), warmupMs: round === 0 ? WARMUP_MS : ROUND_WARMUP_MS }),
      );
    }
  }
  return {
    shape: shape.name,
    stream,
    concurrency,
    runs,
    rounds: results.floor.map((floor, i) => ({ floor, holdfast: results.holdfast[i]! })),
    direct: mergePhases(results.direct),
    floor: { result: mergePhases(results.floor), cpu: floorCpu },
    holdfast: { result: mergePhases(results.holdfast), cpu: holdfastCpu },
    pids: stack.pids,
  };
}

const WIDTHS = [9, 6, 9, 14, 7, 7, 7, 7, 7, 8, 11, 14, 6];
const cells = (values: string[]) =>
  values.map((v, i) => (i < 4 ? v.padEnd(WIDTHS[i]!) : v.padStart(WIDTHS[i]!))).join(" ");
const HEAD = cells([
  "shape",
  "stream",
  "conc",
  "target",
  "req/s",
  "p50",
  "p99",
  "+p50",
  "+p99",
  "ttfb p50",
  "cpu/call gw",
  "cpu/call stack",
  "errors",
]);
let headPrinted = false;

function formatRow(row: Row): string {
  const lines: string[] = [];
  if (!headPrinted) {
    lines.push(HEAD);
    headPrinted = true;
  }
  const d = row.direct;
  const f = row.floor.result;
  const h = row.holdfast.result;
  const p = (r: PhaseResult, q: number) => percentile(r.latencies, q);
  const added = (r: PhaseResult, q: number) => p(r, q) - p(d, q);
  const ttfb = (r: PhaseResult) => percentile(r.firstBytes, 50);
  const floorCpu = row.floor.cpu.ms() / f.requests;
  const gwCpu = row.holdfast.cpu.ms(row.pids.gateway) / h.requests;
  const stackCpu = row.holdfast.cpu.ms() / h.requests;
  const prefix = [
    row.shape,
    row.stream ? "yes" : "no",
    `${row.concurrency}${row.runs === "one" ? " 1run" : ""}`,
  ];
  const ms = (n: number) => n.toFixed(2);
  lines.push(
    cells([
      ...prefix,
      "direct",
      rate(d),
      ms(p(d, 50)),
      ms(p(d, 99)),
      "",
      "",
      ms(ttfb(d)),
      "",
      "",
      String(d.errors),
    ]),
  );
  lines.push(
    cells([
      ...prefix,
      "floor",
      rate(f),
      ms(p(f, 50)),
      ms(p(f, 99)),
      ms(added(f, 50)),
      ms(added(f, 99)),
      ms(ttfb(f)),
      ms(floorCpu),
      ms(floorCpu),
      String(f.errors),
    ]),
  );
  lines.push(
    cells([
      ...prefix,
      "holdfast",
      rate(h),
      ms(p(h, 50)),
      ms(p(h, 99)),
      ms(added(h, 50)),
      ms(added(h, 99)),
      ms(ttfb(h)),
      ms(gwCpu),
      ms(stackCpu),
      String(h.errors),
    ]),
  );
  const x = (a: number, b: number) => `x${(a / b).toFixed(2)}`;
  // What the floor adds under load can be nothing or less (it queues fewer requests than
  // the provider): a ratio to it means nothing then.
  const xAdded = (q: number) => (added(f, q) < 0.05 ? "—" : x(Math.max(added(h, q), 0.001), added(f, q)));
  lines.push(
    cells([
      ...prefix,
      "holdfast/floor",
      x(h.requests / h.seconds, f.requests / f.seconds),
      "",
      "",
      xAdded(50),
      xAdded(99),
      `+${ms(ttfb(h) - ttfb(f))}`,
      x(gwCpu, floorCpu),
      x(stackCpu, floorCpu),
      "",
    ]),
  );
  lines.push(
    `${" ".repeat(21)}holdfast CPU/call by process: ${byProcess(row.holdfast.cpu, row.pids, h.requests)}`,
  );
  return lines.join("\n");
}

/** Each process's CPU per call, ms. */
function byProcess(cpu: CpuMeter, pids: Stack["pids"], calls: number): string {
  const names = ["gateway", "nats", "projector", "budget", "control", "scheduler"] as const;
  return names.map((name) => `${name} ${(cpu.ms(pids[name]) / calls).toFixed(3)}`).join(", ");
}

function legend(): string {
  return [
    "ms throughout. +p50/+p99: latency added over calling the provider directly. ttfb: to the first body",
    "byte. cpu/call: CPU time of the proxy's processes per call (floor: its one process; gw: the Holdfast",
    "gateway process; stack: every process of `holdfast up`: gateway, nats-server, the projector with",
    "embedded ClickHouse, the budget, control and scheduler services).",
  ].join("\n");
}

/**
 * The targets, each checked against the floor measured in the same run: Chat Completions,
 * many runs and one hot run, and the fleet against calling the provider directly.
 */
function targets(rows: Row[], fleet: FleetResult | undefined): string {
  const lines = ["Targets (Chat Completions, Holdfast against the floor in this run):"];
  const check = (what: string, ok: boolean, detail: string) =>
    lines.push(`  ${ok ? "met    " : "NOT met"}  ${what}: ${detail}`);
  const p = (r: PhaseResult, q: number) => percentile(r.latencies, q);
  for (const row of rows.filter((r) => r.shape === "chat")) {
    const d = row.direct;
    const f = row.floor.result;
    const h = row.holdfast.result;
    const name = `chat${row.stream ? " stream" : ""} c=${row.concurrency}${row.runs === "one" ? " one run" : ""}`;
    if (row.concurrency === 1 && !row.stream) {
      const added = (r: PhaseResult) => p(r, 50) - p(d, 50);
      const ratio = added(h) / Math.max(added(f), 0.001);
      check(
        `${name} added p50 <= 2x floor's`,
        ratio <= 2,
        `+${added(h).toFixed(2)} vs +${added(f).toFixed(2)} ms (x${ratio.toFixed(2)})`,
      );
    }
    if (row.concurrency === 1 && row.stream) {
      const extra = percentile(h.firstBytes, 50) - percentile(f.firstBytes, 50);
      check(`${name} first byte <= floor's + 0.3 ms`, extra <= 0.3, `+${extra.toFixed(2)} ms`);
    }
    if (row.concurrency === HOT_CONCURRENCY && !row.stream) {
      const all = row.holdfast.cpu.ms() / h.requests;
      check(`${name} whole-stack CPU/call <= 0.5 ms`, all <= 0.5, `${all.toFixed(3)} ms`);
      const ratio = h.requests / h.seconds / (f.requests / f.seconds);
      const floorShare = row.runs === "one" ? 0.3 : 0.5;
      check(`${name} req/s >= ${floorShare}x floor's`, ratio >= floorShare, `x${ratio.toFixed(2)}`);
      const p99 = p(h, 99) / p(f, 99);
      check(
        `${name} p99 <= 3x floor's`,
        p99 <= 3,
        `${p(h, 99).toFixed(1)} vs ${p(f, 99).toFixed(1)} ms (x${p99.toFixed(2)})`,
      );
      const stalls = row.rounds.filter((r) => p(r.holdfast, 99) > 3 * p(r.floor, 99));
      check(
        `${name} no stall in any round (each round's p99 <= 3x the floor's in that round)`,
        stalls.length === 0,
        row.rounds.map((r) => `${p(r.holdfast, 99).toFixed(1)}/${p(r.floor, 99).toFixed(1)}`).join(", "),
      );
    }
  }
  if (fleet !== undefined) {
    const name = `fleet of ${FLEET} streaming calls`;
    check(`${name}: 0 errors`, fleet.holdfast.errors === 0, `${fleet.holdfast.errors} errors`);
    const ratio =
      fleet.holdfast.requests / fleet.holdfast.seconds / (fleet.direct.requests / fleet.direct.seconds);
    check(`${name}: req/s >= 0.9x direct's`, ratio >= 0.9, `x${ratio.toFixed(2)}`);
    const p99 = p(fleet.holdfast, 99) / p(fleet.direct, 99);
    check(
      `${name}: p99 <= 1.5x direct's`,
      p99 <= 1.5,
      `${p(fleet.holdfast, 99).toFixed(0)} vs ${p(fleet.direct, 99).toFixed(0)} ms (x${p99.toFixed(2)})`,
    );
  }
  return lines.join("\n");
}

interface FleetResult {
  direct: PhaseResult;
  holdfast: PhaseResult;
}

/**
 * A fleet at once: FLEET streaming calls in flight, spread over as many runs, against a
 * provider that takes 1 s before its headers and then sends its 20 events 50 ms apart
 * (about 2 s a call at best): direct to the provider, through the floor, through Holdfast.
 */
async function fleetPhase(stack: Stack): Promise<FleetResult> {
  // "Fake reply to:" and these 17 words: 20 content events (plus the role's and the end's).
  const words =
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen";
  const shape: ShapeLoad = {
    ...SHAPE_LOADS[0]!,
    body: (stream) =>
      JSON.stringify({ model: "gpt-4o-mini", stream, messages: [{ role: "user", content: words }] }),
  };
  const headers = { "x-fake-latency-ms": "1000", "x-fake-chunk-delay-ms": "50" };
  const measure = async (origin: string, pids: number[]) => {
    const cpu = new CpuMeter(pids);
    const result = await runPhase({
      shape,
      stream: true,
      concurrency: FLEET,
      warmupMs: 3_000,
      measureMs: FLEET_MS,
      origin,
      headers,
      runOf: (i) => `bench-fleet-${i % FLEET}`,
      onMeasure: (at) => (at === "start" ? cpu.start() : cpu.stop()),
    });
    return { result, cpu };
  };
  const { gateway, nats, projector, budget, control, scheduler } = stack.pids;
  const direct = await measure(stack.providerUrl, []);
  const floor = await measure(stack.floorUrl, [stack.pids.floor]);
  const holdfast = await measure(stack.gatewayUrl, [gateway, nats, projector, budget, control, scheduler]);
  const line = (name: string, m: { result: PhaseResult; cpu: CpuMeter }, cpu: string) =>
    `  ${name.padEnd(9)} ${(m.result.requests / m.result.seconds).toFixed(0).padStart(6)} req/s, p50 ${percentile(m.result.latencies, 50).toFixed(0)} ms, p99 ${percentile(m.result.latencies, 99).toFixed(0)} ms, errors ${m.result.errors}${cpu}`;
  console.log(
    `\nA fleet at once: ${FLEET} streaming chat calls in flight over ${FLEET} runs, provider 1 s then 20 events 50 ms apart, ${FLEET_MS} ms measured:`,
  );
  console.log(line("direct", direct, ""));
  console.log(line("floor", floor, `, CPU ${(floor.cpu.ms() / 1000).toFixed(1)} s`));
  console.log(
    line(
      "holdfast",
      holdfast,
      `, CPU gateway ${(holdfast.cpu.ms(gateway) / 1000).toFixed(1)} s, stack ${(holdfast.cpu.ms() / 1000).toFixed(1)} s` +
        ` (per call: ${byProcess(holdfast.cpu, stack.pids, holdfast.result.requests)})`,
    ),
  );
  return { direct: direct.result, holdfast: holdfast.result };
}

async function warmUp(stack: Stack): Promise<void> {
  for (const shape of SHAPE_LOADS.filter((s) => SHAPES.includes(s.name))) {
    for (const stream of [false, true]) {
      for (const origin of [stack.floorUrl, stack.gatewayUrl]) {
        await runPhase({
          shape,
          stream,
          concurrency: 8,
          warmupMs: 0,
          measureMs: WARMUP_PER_SHAPE_MS,
          origin,
          runOf: (i) => `bench-warmup-${shape.name}-${i % RUNS}`,
        });
      }
    }
  }
}

/**
 * Two gateways taking turns on one run, against one gateway alone on one run: in
 * alternating rounds (one, two, one, two, ...), so that the machine's drift over a run
 * (other tenants of the host, its CPU's clock) falls on both alike; the ratio is the
 * median of the rounds'.
 */
async function alternating(stack: Stack): Promise<void> {
  const second = await startSecondGateway(stack);
  const shape = SHAPE_LOADS[0]!;
  // The second gateway starts now: it serves the shape as long as every proxy did before
  // the first phase, so that its code is compiled and optimized before it is measured too.
  await runPhase({
    shape,
    stream: false,
    concurrency: 8,
    warmupMs: 0,
    measureMs: WARMUP_PER_SHAPE_MS,
    origin: second.url,
    runOf: (i) => `bench-warmup-second-${i % RUNS}`,
  });
  const base = { shape, stream: false, concurrency: 1, warmupMs: 500, measureMs: PHASE_MS / 2 };
  const ones: PhaseResult[] = [];
  const twos: PhaseResult[] = [];
  for (let round = 0; round < ALTERNATING_ROUNDS; round++) {
    ones.push(await runPhase({ ...base, origin: stack.gatewayUrl, runOf: () => "bench-one-gateway" }));
    twos.push(
      await runPhase({ ...base, origin: [stack.gatewayUrl, second.url], runOf: () => "bench-two-gateways" }),
    );
  }
  second.child.kill("SIGINT");
  const p50 = (r: PhaseResult) => percentile(r.latencies, 50);
  const ratios = ones.map((one, i) => p50(twos[i]!) / p50(one)).sort((x, y) => x - y);
  const ratio = ratios[Math.floor(ratios.length / 2)]!;
  console.log(
    `\nOne run, c=1, non-streaming chat: one gateway, then two gateways taking turns call by call, ${ALTERNATING_ROUNDS} rounds:`,
  );
  for (const [i, one] of ones.entries()) {
    const two = twos[i]!;
    console.log(
      `  round ${i + 1}: one gateway p50 ${p50(one).toFixed(2)} ms (errors ${one.errors}), two gateways p50 ${p50(two).toFixed(2)} ms (errors ${two.errors}): x${(p50(two) / p50(one)).toFixed(2)}`,
    );
  }
  console.log(
    `  ${ratio <= 1.5 ? "met    " : "NOT met"}  two gateways within 1.5x of one (median of the rounds): x${ratio.toFixed(2)}`,
  );
}

async function longRun(stack: Stack): Promise<void> {
  const runId = `bench-long-${Date.now()}`;
  const result = await runPhase({
    shape: SHAPE_LOADS[0]!,
    stream: false,
    concurrency: 1,
    warmupMs: 0,
    measureMs: 0,
    calls: STEPS,
    runOf: () => runId,
    origin: stack.gatewayUrl,
  });
  const slice = (from: number, to: number) => Float64Array.from(result.inOrder.subarray(from, to)).sort();
  const n = Math.min(1_000, Math.floor(result.inOrder.length / 4));
  const first = slice(0, n);
  const last = slice(result.inOrder.length - n, result.inOrder.length);
  console.log(`\nOne run of ${result.requests} sequential calls (c=1, chat), errors ${result.errors}:`);
  console.log(
    `  first ${n} calls p50 ${percentile(first, 50).toFixed(2)} ms, last ${n} calls p50 ${percentile(last, 50).toFixed(2)} ms` +
      ` (x${(percentile(last, 50) / percentile(first, 50)).toFixed(2)})`,
  );
  const started = performance.now();
  const show = spawn(
    process.execPath,
    [join(ROOT, "libs/cli/dist/bin.js"), "show", runId, "--json", "--data-dir", stack.dataDir],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let bytes = 0;
  show.stdout?.on("data", (chunk: Buffer) => {
    bytes += chunk.length;
  });
  const code = await new Promise<number | null>((resolve) => show.once("exit", resolve));
  console.log(
    `  holdfast show of that run: ${Math.round(performance.now() - started)} ms (exit ${code}, ${bytes} bytes of JSON)`,
  );
}

/**
 * How far the projection is behind, sampled every 100 ms from the projector's health: the
 * time since the stream held what is now projected.
 */
class LagSampler {
  measuring = false;
  private readonly samples: number[] = [];
  private readonly history: { at: number; lastSeq: number }[] = [];
  private running = true;
  private readonly loop: Promise<void>;

  constructor(
    private readonly analyticsUrl: string,
    private readonly headers: Record<string, string>,
  ) {
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        const health = (await (
          await fetch(`${this.analyticsUrl}/health`, { headers: this.headers })
        ).json()) as {
          stream_last_seq: number;
          projected_seq: number;
        };
        const now = performance.now();
        this.history.push({ at: now, lastSeq: health.stream_last_seq });
        if (this.history.length > 2_000) this.history.splice(0, 1_000);
        if (this.measuring) {
          // Behind by the age of the oldest event not projected yet: since the stream first
          // held more than the checkpoint (read once a second by the projector).
          const since = this.history.find((h) => h.lastSeq > health.projected_seq);
          this.samples.push(since === undefined ? 0 : now - since.at);
        }
      } catch {
        // The projector is busy; the next sample will do.
      }
      await sleep(100);
    }
  }

  stop(): void {
    this.running = false;
    void this.loop;
  }

  report(): string {
    const sorted = Float64Array.from(this.samples).sort();
    return (
      `p50 ${percentile(sorted, 50).toFixed(0)} ms, p99 ${percentile(sorted, 99).toFixed(0)} ms, ` +
      `max ${(sorted.at(-1) ?? 0).toFixed(0)} ms (${sorted.length} samples, 100 ms resolution; target p99 < 2000 ms: ` +
      `${percentile(sorted, 99) < 2_000 ? "met" : "NOT met"})`
    );
  }
}

async function startStack(): Promise<Stack> {
  const dataDir = mkdtempSync(join(tmpdir(), "holdfast-bench-"));
  const children: ChildProcess[] = [];
  const providerUrl = await startProvider(children);
  const floor = spawn(process.execPath, [join(ROOT, "test/bench/dist/floor.js"), "--upstream", providerUrl], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  children.push(floor);
  const floorUrl = await firstMatch(floor, /listening on (http:\/\/\S+)/);
  const { up, file } = await startUp({ dataDir, providerUrl }, children);
  const kids = childrenOf(up.pid!);
  const pidOf = (pattern: RegExp) => {
    const found = kids.find((k) => pattern.test(k.cmdline));
    if (found === undefined) throw new Error(`no ${pattern} among up's processes: ${JSON.stringify(kids)}`);
    return found.pid;
  };
  return {
    providerUrl,
    floorUrl,
    gatewayUrl: new URL(file.gatewayUrl).origin,
    natsUrl: file.natsUrl,
    analyticsUrl: file.analyticsUrl,
    pids: {
      floor: floor.pid!,
      gateway: pidOf(/gateway\/dist\/main\.js/),
      projector: pidOf(/projector\/dist\/main\.js/),
      nats: pidOf(/nats-server/),
      budget: pidOf(/budget\/dist\/main\.js/),
      control: pidOf(/control\/dist\/main\.js/),
      scheduler: pidOf(/scheduler\/dist\/main\.js/),
    },
    children,
    dataDir,
  };
}

function startSecondGateway(stack: Stack): Promise<{ url: string; child: ChildProcess }> {
  return startExtraGateway(
    {
      dataDir: stack.dataDir,
      natsUrl: stack.natsUrl,
      providerUrl: stack.providerUrl,
      instanceId: "bench-second",
    },
    stack.children,
  );
}

const rate = (r: PhaseResult) => (r.requests / r.seconds).toFixed(0);

await main();
