// pnpm bench:durable — durable runs (the scheduler, the SDK's worker, JetStream as the
// log) side by side with the figures the peers publish, and against the goals.
//
// It starts `holdfast up` (nats-server, the projector with embedded ClickHouse, the
// gateway, the budget, control and scheduler services: each its own process, as users run
// it) with a nats-server that fsyncs every write (`nats.sync_interval: always`), and serves
// the agents of ./durable-agents.ts from worker processes of ./durable-worker.ts, each
// killed, stopped or started as a phase needs. The bench process is the client (submit,
// re-drive) and reads the log for the events' timestamps. Then it starts a second stack
// with nats-server's default sync (JetStream's own, every 2 min) for the per-step and
// dispatch figures on it. Every time is taken with this machine's wall clock at sub-ms
// precision (performance.timeOrigin + performance.now()), in whichever process saw the
// moment. Linux only (CPU and disk flushes come from /proc).
//
//   BENCH_STEPS (2000)          steps of the per-step run      BENCH_REPEATS (3): runs of it
//   BENCH_REUSE_STEPS (1000)    reused steps of a re-drive
//   BENCH_FAILOVERS (3)         kill -9 failovers              BENCH_LEASE_MS (5000): scheduler.lease_ms
//   BENCH_DISPATCHES (50)       submissions for dispatch       BENCH_ITEMS (40): items per throughput round
//   BENCH_PHASES (steps,reuse,failover,dispatch,fanout,throughput,default)
//     which phases run; "default" is the second stack (default sync)
import { type ChildProcess, spawn } from "node:child_process";
import {
  closeSync,
  fsyncSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { createServer } from "node:net";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Bus, connectBus } from "@holdfast/bus";
import type { StoredEnvelope } from "@holdfast/events";
import { DurableStatus, durableStatusToJSON, RunsApi } from "@holdfast/sdk";
import { CpuMeter, childrenOf } from "./cpu.js";
import { BENCH_AGENTS, wallMs } from "./durable-agents.js";
import { percentile, sleep } from "./load.js";
import { startUp, type UpFile } from "./processes.js";

const STEPS = Number(process.env.BENCH_STEPS ?? 2_000);
const REPEATS = Math.max(1, Number(process.env.BENCH_REPEATS ?? 3));
const REUSE_STEPS = Number(process.env.BENCH_REUSE_STEPS ?? 1_000);
const FAILOVERS = Math.max(1, Number(process.env.BENCH_FAILOVERS ?? 3));
const LEASE_MS = Number(process.env.BENCH_LEASE_MS ?? 5_000);
const DISPATCHES = Number(process.env.BENCH_DISPATCHES ?? 50);
const ITEMS = Number(process.env.BENCH_ITEMS ?? 40);
const SCHEDULER_BACK_MS = 15_000;
const PHASES = new Set(
  (process.env.BENCH_PHASES ?? "steps,reuse,failover,dispatch,fanout,throughput,default").split(","),
);
const WORKER_SCRIPT = fileURLToPath(new URL("./durable-worker.js", import.meta.url));
// Nothing here calls a model: the gateway's upstream is never reached.
const NO_PROVIDER = "http://127.0.0.1:9";

// ---- What the worker processes say ----

/** A line a worker process wrote: its SDK's events and its agents' marks, with when (`at`, wall ms). */
interface Mark {
  type: string;
  at: number;
  /** The worker process that wrote it. */
  from: string;
  runId?: string;
  page?: number;
  ok?: boolean;
  reused?: number;
  ran?: number;
  error?: string;
  loopMs?: number;
}

/** Every line the stack's workers wrote, and whoever waits for one. */
class Marks {
  private list: Mark[] = [];
  private readonly waiters = new Set<{ test: (m: Mark) => boolean; resolve: (m: Mark) => void }>();

  add(mark: Mark): void {
    this.list.push(mark);
    for (const waiter of this.waiters) {
      if (waiter.test(mark)) {
        this.waiters.delete(waiter);
        waiter.resolve(mark);
      }
    }
  }

  /** The first line (already written or to come) that passes `test`. */
  wait(test: (m: Mark) => boolean, timeoutMs: number, what: string): Promise<Mark> {
    const found = this.list.find(test);
    if (found !== undefined) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const waiter = {
        test,
        resolve: (m: Mark) => {
          clearTimeout(timer);
          resolve(m);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      this.waiters.add(waiter);
    });
  }

  all(test: (m: Mark) => boolean): Mark[] {
    return this.list.filter(test);
  }

  clear(): void {
    this.list = [];
  }
}

// ---- The stack ----

interface WorkerProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number;
  readonly exited: Promise<void>;
}

interface Stack {
  readonly label: string;
  readonly dataDir: string;
  readonly up: ChildProcess;
  readonly file: UpFile;
  readonly api: RunsApi;
  readonly bus: Bus;
  /** The scheduler's changes when `up` restarts it. */
  readonly pids: { nats: number; scheduler: number; rest: number[] };
  readonly natsConfig: string;
  readonly marks: Marks;
  readonly workers: Set<WorkerProcess>;
  readonly children: ChildProcess[];
}

const stacks = new Set<Stack>();
let interrupted = false;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (typeof address !== "object" || address === null) throw new Error("no free port");
  return address.port;
}

/** `holdfast up` in a fresh data dir; `fsync`: its nats-server fsyncs every write. */
async function startStack(label: string, fsync: boolean): Promise<Stack> {
  const dataDir = mkdtempSync(join(tmpdir(), `holdfast-bench-durable-${label}-`));
  const configFile = join(dataDir, "holdfast.yaml");
  // Fixed scheduler ports: a scheduler restarted by `up` (killed in the reuse phase) comes
  // back where the workers and this client dial.
  const config = [
    ...(fsync ? ["nats:", '  sync_interval: "always"'] : []),
    "scheduler:",
    "  host: 127.0.0.1",
    `  grpc_port: ${await freePort()}`,
    `  port: ${await freePort()}`,
    `  lease_ms: ${LEASE_MS}`,
    "control:",
    "  port: 0",
    "  grpc_port: 0",
    "",
  ].join("\n");
  writeFileSync(configFile, config);
  const children: ChildProcess[] = [];
  let started: Awaited<ReturnType<typeof startUp>>;
  try {
    started = await startUp(
      { dataDir: join(dataDir, "data"), providerUrl: NO_PROVIDER, configFile },
      children,
    );
  } catch (error) {
    for (const child of children) child.kill("SIGINT");
    await sleep(3_000);
    rmSync(dataDir, { recursive: true, force: true });
    throw error;
  }
  const { up, file } = started;
  const kids = childrenOf(up.pid!);
  const pidOf = (pattern: RegExp) => {
    const found = kids.find((k) => pattern.test(k.cmdline));
    if (found === undefined) throw new Error(`no ${pattern} among up's processes: ${JSON.stringify(kids)}`);
    return found.pid;
  };
  const nats = pidOf(/nats-server/);
  const scheduler = pidOf(/scheduler\/dist\/main\.js/);
  const api = new RunsApi({ scheduler: file.schedulerGrpc });
  const bus = await connectBus({ servers: file.natsUrl, prefix: "hf", name: `bench-durable ${label}` });
  const stack: Stack = {
    label,
    dataDir,
    up,
    file,
    api,
    bus,
    // `up` itself, the projector (embedded ClickHouse), the gateway, budget and control services.
    pids: {
      nats,
      scheduler,
      rest: [up.pid!, ...kids.map((k) => k.pid).filter((p) => p !== nats && p !== scheduler)],
    },
    natsConfig: natsConfigOf(nats),
    marks: new Marks(),
    workers: new Set(),
    children,
  };
  stacks.add(stack);
  for (const a of BENCH_AGENTS) await api.deploy(a);
  return stack;
}

/** What nats-server was started with: its -c file, as the evidence of its sync setting. */
function natsConfigOf(pid: number): string {
  const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
  const at = args.indexOf("-c");
  if (at < 0) return "no config file: nats-server's defaults";
  return readFileSync(args[at + 1]!, "utf8")
    .trim()
    .replaceAll(/\s+/g, " ");
}

async function stopStack(stack: Stack): Promise<void> {
  stacks.delete(stack);
  for (const w of stack.workers) w.child.kill("SIGKILL");
  stack.api.close();
  await stack.bus.close().catch(() => undefined);
  const exited = new Promise<void>((resolve) => {
    if (stack.up.exitCode !== null || stack.up.signalCode !== null) resolve();
    else stack.up.once("exit", () => resolve());
  });
  // Ctrl-C in a terminal reached `up` too (one process group), and a second SIGINT would
  // make it exit without stopping its services: give it a moment to stop on its own.
  if (interrupted) await Promise.race([exited, sleep(3_000)]);
  stack.up.kill("SIGINT");
  await Promise.race([exited, sleep(20_000)]);
  if (stack.up.exitCode === null && stack.up.signalCode === null) stack.up.kill("SIGKILL");
  rmSync(stack.dataDir, { recursive: true, force: true });
}

/** A worker process serving the bench's agents; resolves once it is connected. */
async function spawnWorker(stack: Stack, name: string): Promise<WorkerProcess> {
  const child = spawn(process.execPath, [WORKER_SCRIPT], {
    env: { ...process.env, SCHEDULER: stack.file.schedulerGrpc, NAME: name, SLOTS: "1" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const w: WorkerProcess = { name, child, pid: child.pid!, exited };
  stack.workers.add(w);
  void exited.then(() => stack.workers.delete(w));
  let buffered = "";
  child.stdout!.on("data", (chunk: Buffer) => {
    buffered += chunk.toString();
    let nl = buffered.indexOf("\n");
    while (nl >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      nl = buffered.indexOf("\n");
      try {
        stack.marks.add({ ...(JSON.parse(line) as Mark), from: name });
      } catch {
        // Not one of ours.
      }
    }
  });
  await Promise.race([
    stack.marks.wait((m) => m.type === "ready" && m.from === name, 30_000, `worker ${name} to connect`),
    exited.then(() => {
      throw new Error(`worker ${name} exited before it was ready`);
    }),
  ]);
  return w;
}

async function killWorker(w: WorkerProcess, signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
  w.child.kill(signal);
  await w.exited;
}

async function killAll(stack: Stack): Promise<void> {
  await Promise.all([...stack.workers].map((w) => killWorker(w)));
  stack.marks.clear();
}

/** The worker's `finished` line for this run, written after `after` (its end recorded). */
function finished(stack: Stack, runId: string, after = 0, timeoutMs = 120_000): Promise<Mark> {
  return stack.marks.wait(
    (m) => m.type === "finished" && m.runId === runId && m.at > after,
    timeoutMs,
    `run ${runId} to finish`,
  );
}

async function outputOf<T>(stack: Stack, runId: string): Promise<T> {
  const run = await stack.api.get(runId);
  if (run.status !== DurableStatus.DURABLE_STATUS_FINISHED) {
    throw new Error(`run ${runId} is ${durableStatusToJSON(run.status)}: ${run.error}`);
  }
  return JSON.parse(run.outputJson) as T;
}

async function events(stack: Stack, runId: string): Promise<StoredEnvelope[]> {
  return (await stack.bus.readRun(runId)).events.map((e) => e.envelope);
}

// ---- Figures ----

const sorted = (values: number[]) => Float64Array.from(values).sort();
const median = (values: number[]) => percentile(sorted(values), 50);
const ms = (n: number, digits = 3) => (Number.isFinite(n) ? `${n.toFixed(digits)} ms` : "n/a");
const s = (n: number, digits = 2) => (Number.isFinite(n) ? `${(n / 1_000).toFixed(digits)} s` : "n/a");

/** What the final table and the goals are made of (NaN: not measured). */
const results = {
  stepFsync: Number.NaN,
  stepFsyncClient: Number.NaN,
  stepDefault: Number.NaN,
  reuseWarm: Number.NaN,
  reuseWarmSdk: Number.NaN,
  reuseKill: Number.NaN,
  reuseKillSdk: Number.NaN,
  reuseSchedulerKill: Number.NaN,
  failoverDropped: Number.NaN,
  failoverHung: Number.NaN,
  dispatchP50: Number.NaN,
  dispatchP99: Number.NaN,
  dispatchDefaultP50: Number.NaN,
  dispatchDefaultP99: Number.NaN,
  fanout: Number.NaN,
  throughput: [] as { workers: number; perSecond: number }[],
};

/** fsync latency of this machine's disk where the stack keeps its data: the floor of a step fsynced. */
function fsyncProbe(dir: string): number[] {
  const path = join(dir, "fsync-probe");
  const fd = openSync(path, "w");
  const block = Buffer.alloc(200, 1);
  const times: number[] = [];
  try {
    for (let i = 0; i < 200; i++) {
      const started = performance.now();
      writeSync(fd, block);
      fsyncSync(fd);
      times.push(performance.now() - started);
    }
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
  return times;
}

/** Cache flushes the block device under `dir` has completed (/proc/diskstats): what fsyncs cost it. */
function diskFlushes(dir: string): number {
  const dev = statSync(dir).dev;
  const major = Number((BigInt(dev) >> 8n) & 0xfffn);
  const minor = Number((BigInt(dev) & 0xffn) | ((BigInt(dev) >> 12n) & 0xfff00n));
  for (const line of readFileSync("/proc/diskstats", "utf8").split("\n")) {
    const f = line.trim().split(/\s+/);
    if (Number(f[0]) === major && Number(f[1]) === minor) return Number(f[18] ?? Number.NaN);
  }
  return Number.NaN;
}

// ---- 1. Per-step checkpoint ----

async function perStep(stack: Stack, fsync: boolean): Promise<void> {
  console.log(
    `\n[1] Per-step checkpoint, ${fsync ? "nats-server fsyncing every write" : "nats-server's default sync"} (${stack.natsConfig})`,
  );
  console.log(
    `    an agent doing ${STEPS} trivial steps (run.step("s", () => i)), ${REPEATS} runs after a warm-up run; one worker process`,
  );
  const w = await spawnWorker(stack, `${stack.label}-steps`);
  const warm = await stack.api.submit("bench-checkpoints", { n: STEPS });
  await finished(stack, warm.run.runId);
  const perStepWorker: number[] = [];
  const perStepClient: number[] = [];
  for (let r = 0; r < REPEATS; r++) {
    const cpu = new CpuMeter([w.pid, stack.pids.scheduler, stack.pids.nats, ...stack.pids.rest]);
    const flushes = diskFlushes(stack.dataDir);
    cpu.start();
    const started = wallMs();
    const { run } = await stack.api.submit("bench-checkpoints", { n: STEPS });
    const done = await finished(stack, run.runId);
    cpu.stop();
    const flushed = diskFlushes(stack.dataDir) - flushes;
    const out = await outputOf<{ loopMs: number; ran: number }>(stack, run.runId);
    const worker = out.loopMs / STEPS;
    const client = (done.at - started) / STEPS;
    perStepWorker.push(worker);
    perStepClient.push(client);
    const per = (...pids: number[]) => ((cpu.ms(...pids) / STEPS) * 1_000).toFixed(0);
    console.log(
      `    run ${r + 1}: ${ms(worker)} per step in the worker (${out.ran} steps in ${out.loopMs.toFixed(0)} ms); ` +
        `${ms(client)} per step submit-to-finish; CPU per step: worker ${per(w.pid)} µs, scheduler ` +
        `${per(stack.pids.scheduler)} µs, nats-server ${per(stack.pids.nats)} µs, rest of the stack ${per(...stack.pids.rest)} µs; disk flushes ${(flushed / STEPS).toFixed(2)} per step`,
    );
  }
  const m = median(perStepWorker);
  console.log(`    median: ${ms(m)} per step (worker side), ${ms(median(perStepClient))} submit-to-finish`);
  if (fsync) {
    results.stepFsync = m;
    results.stepFsyncClient = median(perStepClient);
  } else {
    results.stepDefault = m;
  }
  await killAll(stack);
}

// ---- 2. Reuse on a re-drive ----

interface Cycle {
  runId: string;
  fixFile: string;
  /** What one fresh step took in the run that failed (its n steps' loop, in the worker). */
  freshStepMs: number;
}

/** Submits a reuse run of `n` steps and waits for it to fail at its last. */
async function failing(stack: Stack, n: number): Promise<Cycle> {
  const fixFile = join(stack.dataDir, `fix-${Date.now()}-${Math.random().toString(36).slice(2)}`);
  const { run } = await stack.api.submit("bench-reuse", { n, fixFile });
  const done = await finished(stack, run.runId);
  if (done.ok !== false) throw new Error(`reuse run ${run.runId} did not fail as it should`);
  const loop = stack.marks.all((m) => m.type === "loop" && m.runId === run.runId)[0];
  return { runId: run.runId, fixFile, freshStepMs: (loop?.loopMs ?? Number.NaN) / n };
}

interface Redriven {
  freshStepMs: number;
  wallMs: number;
  /** The redrive call's own time (it answers with the run as it then stands). */
  answerMs: number;
  /** A Get of the run after it finished: the read of its whole history. */
  getMs: number;
  toStartMs: number;
  loopMs: number;
  lastMs: number;
  reused: number;
}

/** Fixes the failure and re-drives: from the re-drive call to the worker's end of the run. */
async function redrive(stack: Stack, cycle: Cycle): Promise<Redriven> {
  writeFileSync(cycle.fixFile, "fixed");
  const started = wallMs();
  await stack.api.redrive(cycle.runId, "fixed");
  const answered = wallMs();
  const start = await stack.marks.wait(
    (m) => m.type === "started" && m.runId === cycle.runId && m.at > started,
    60_000,
    "the re-driven run to start",
  );
  const done = await finished(stack, cycle.runId, started);
  const got = performance.now();
  const out = await outputOf<{ loopMs: number; lastMs: number; reused: number }>(stack, cycle.runId);
  const getMs = performance.now() - got;
  return {
    freshStepMs: cycle.freshStepMs,
    wallMs: done.at - started,
    answerMs: answered - started,
    getMs,
    toStartMs: start.at - started,
    loopMs: out.loopMs,
    lastMs: out.lastMs,
    reused: out.reused,
  };
}

function reuseLine(label: string, r: Redriven): { perStep: number; sdk: number } {
  const perStep = (r.wallMs - r.freshStepMs) / r.reused;
  const sdk = r.loopMs / r.reused;
  console.log(
    `    ${label}: ${ms(perStep, 4)} per reused step = (re-drive ${r.wallMs.toFixed(1)} ms - one fresh step ${r.freshStepMs.toFixed(2)} ms) / ${r.reused}`,
  );
  console.log(
    `      redrive call answered in ${r.answerMs.toFixed(1)} ms; worker began the run ${r.toStartMs.toFixed(1)} ms after the call; SDK lookups ` +
      `${ms(sdk, 4)} per reused step (${r.loopMs.toFixed(2)} ms for ${r.reused}); the fresh last step took ${r.lastMs.toFixed(1)} ms ` +
      `(${(r.lastMs / r.freshStepMs).toFixed(0)}x a fresh step: recorded while the scheduler answered the redrive call); a Get of the run takes ${r.getMs.toFixed(1)} ms`,
  );
  return { perStep, sdk };
}

async function reusePhase(stack: Stack): Promise<void> {
  console.log(
    `\n[2] Reuse: a run of ${REUSE_STEPS} trivial steps and a last one that fails (NonRetriable), fixed, then re-driven (RunsApi.redrive)`,
  );
  console.log(
    "    per reused step: (wall time from the redrive call to the worker's end of the run, minus what one fresh step takes (the failed run's",
  );
  console.log("    steps, same worker) / reused steps;");
  console.log(
    "    it includes the re-drive and lease records, handing the worker the recorded results, and the run's end record.",
  );
  console.log(
    "    SDK lookups: the time the agent's loop over the reused steps took inside the worker (run.step alone).",
  );
  const first = await spawnWorker(stack, "reuse-1");
  // A warm-up cycle: the worker's code for both paths compiled.
  await redrive(stack, await failing(stack, Math.min(200, REUSE_STEPS)));
  const warm: { perStep: number; sdk: number }[] = [];
  for (let r = 1; r <= REPEATS; r++) {
    warm.push(
      reuseLine(
        `warm ${r} (same worker process, scheduler holds the results)`,
        await redrive(stack, await failing(stack, REUSE_STEPS)),
      ),
    );
  }
  results.reuseWarm = median(warm.map((w) => w.perStep));
  results.reuseWarmSdk = median(warm.map((w) => w.sdk));
  console.log(
    `    warm, median of ${REPEATS}: ${ms(results.reuseWarm, 4)} per reused step (SDK lookups ${ms(results.reuseWarmSdk, 4)})`,
  );

  // After a kill -9 of the worker that ran it: a fresh process takes the re-drive.
  const killed: { perStep: number; sdk: number }[] = [];
  let running = first;
  for (let r = 1; r <= REPEATS; r++) {
    const cycle = await failing(stack, REUSE_STEPS);
    await killWorker(running);
    running = await spawnWorker(stack, `reuse-fresh-${r}`);
    killed.push(
      reuseLine(
        `after kill -9 of its worker ${r} (a fresh worker process re-drives it)`,
        await redrive(stack, cycle),
      ),
    );
  }
  results.reuseKill = median(killed.map((w) => w.perStep));
  results.reuseKillSdk = median(killed.map((w) => w.sdk));
  console.log(
    `    after a kill, median of ${REPEATS}: ${ms(results.reuseKill, 4)} per reused step (SDK lookups ${ms(results.reuseKillSdk, 4)})`,
  );
  await killAll(stack);
}

/**
 * A re-drive after a kill -9 of the scheduler: `up` restarts it and the run's results are
 * read from the log. Last of the stack's phases: a scheduler that does not come back
 * leaves the stack without one.
 */
async function schedulerKillPhase(stack: Stack): Promise<void> {
  console.log(
    `\n[2b] Reuse after kill -9 of the scheduler (\`up\` restarts it; the run's results are read from the log)`,
  );
  await spawnWorker(stack, "reuse-3");
  const cycle = await failing(stack, REUSE_STEPS);
  const killedAt = wallMs();
  process.kill(stack.pids.scheduler, "SIGKILL");
  const back = await schedulerBack(stack, killedAt, SCHEDULER_BACK_MS);
  if (back === undefined) {
    const log = join(stack.dataDir, "data", "logs", "scheduler.log");
    const lines = readFileSync(log, "utf8").trim().split("\n");
    const restarts = lines.filter((l) => l === lines.at(-1)).length;
    console.log(
      `    n/a: the scheduler did not come back within ${s(SCHEDULER_BACK_MS, 0)}; its log ends with ${JSON.stringify(lines.at(-1))} (${restarts} times)`,
    );
  } else {
    const fromLog = reuseLine(`scheduler back in ${s(back)}`, await redrive(stack, cycle));
    results.reuseSchedulerKill = fromLog.perStep;
  }
  await killAll(stack);
}

/** Waits for `up` to restart the scheduler and the workers to be connected to it again; how long since the kill. */
async function schedulerBack(stack: Stack, killedAt: number, withinMs: number): Promise<number | undefined> {
  const deadline = Date.now() + withinMs;
  while (Date.now() < deadline) {
    try {
      await stack.api.agents();
      const reconnected = stack.marks.all((m) => m.type === "connected" && m.at > killedAt);
      if (reconnected.length >= stack.workers.size) {
        const restarted = childrenOf(stack.up.pid!).find((k) => /scheduler\/dist\/main\.js/.test(k.cmdline));
        if (restarted !== undefined) stack.pids.scheduler = restarted.pid;
        return wallMs() - killedAt;
      }
    } catch {
      // Not back yet.
    }
    await sleep(50);
  }
  return undefined;
}

// ---- 3. Failover ----

async function failoverPhase(stack: Stack): Promise<void> {
  console.log(
    `\n[3] Failover: worker A runs a 60-step item (20 ms steps), worker B idle; A is killed (or stopped) mid-item.`,
  );
  console.log(
    "    takeover: from the signal to B's first step of the item starting (B's clock); recorded: to that step's StepRecorded (the log's timestamp, ms)",
  );
  const dropped: number[] = [];
  for (let i = 1; i <= FAILOVERS; i++) {
    const r = await failover(stack, `A${i}`, `B${i}`, "SIGKILL");
    dropped.push(r.takeover);
  }
  results.failoverDropped = median(dropped);
  console.log(`    kill -9 (dropped connection), median of ${FAILOVERS}: ${ms(results.failoverDropped, 1)}`);
  const hung = await failover(stack, "A-hung", "B-hung", "SIGSTOP");
  results.failoverHung = hung.takeover;
  await killAll(stack);
}

async function failover(
  stack: Stack,
  nameA: string,
  nameB: string,
  signal: "SIGKILL" | "SIGSTOP",
): Promise<{ takeover: number }> {
  const a = await spawnWorker(stack, nameA);
  const { run } = await stack.api.submit("bench-pages", { pages: 60, stepMs: 20, marks: true });
  const runId = run.runId;
  await stack.marks.wait(
    (m) => m.type === "step" && m.runId === runId && m.from === nameA,
    30_000,
    "A to start",
  );
  const b = await spawnWorker(stack, nameB);
  // A is mid-item: a step of it began after B was ready.
  const readyB = stack.marks.all((m) => m.type === "ready" && m.from === nameB)[0]!.at;
  await stack.marks.wait(
    (m) => m.type === "step" && m.runId === runId && m.from === nameA && m.at > readyB + 30,
    30_000,
    "A to go on",
  );
  const signalledAt = wallMs();
  a.child.kill(signal);
  const first = await stack.marks.wait(
    (m) => m.type === "step" && m.runId === runId && m.from === nameB,
    LEASE_MS * 4 + 30_000,
    "B to take the item over",
  );
  await finished(stack, runId, 0, 60_000);
  const sum = await outputOf<number>(stack, runId);
  if (signal === "SIGSTOP") await killWorker(a);
  else await a.exited;
  const all = await events(stack, runId);
  const released = all.find((e) => e.type === "RunReleased" && e.timestampMs >= Math.floor(signalledAt));
  const leasedB = all.find(
    (e) => e.type === "RunLeased" && e.payload?.$case === "runLeased" && e.payload.value.worker === nameB,
  );
  const leaseB = leasedB?.payload?.$case === "runLeased" ? leasedB.payload.value.lease : -1;
  const recordedB = all.find(
    (e) =>
      e.type === "StepRecorded" && e.payload?.$case === "stepRecorded" && e.payload.value.lease === leaseB,
  );
  const pagesA = new Set(
    stack.marks.all((m) => m.runId === runId && m.from === nameA && m.type === "step").map((m) => m.page),
  );
  const pagesB = stack.marks
    .all((m) => m.runId === runId && m.from === nameB && m.type === "step")
    .map((m) => m.page);
  const twice = pagesB.filter((p) => pagesA.has(p)).length;
  const since = (t: number | undefined) => (t === undefined ? "n/a" : ms(t - signalledAt, 0));
  const takeover = first.at - signalledAt;
  console.log(
    `    ${signal === "SIGKILL" ? "kill -9" : `SIGSTOP (lease ${LEASE_MS} ms)`} ${nameA}: released ${since(released?.timestampMs)}, ` +
      `leased to ${nameB} ${since(leasedB?.timestampMs)}, its first step began ${ms(takeover, 1)}, recorded ${since(recordedB?.timestampMs)}; ` +
      `item finished (sum ${sum === 1830 ? "right" : `WRONG: ${sum}`}), pages run twice: ${twice}`,
  );
  await killWorker(b);
  return { takeover };
}

// ---- 4. Dispatch ----

async function dispatchPhase(stack: Stack, fsync: boolean): Promise<void> {
  console.log(
    `\n[4] Dispatch${fsync ? "" : " (default sync)"}: submit (this process, gRPC) to the first step starting in a worker process; ${DISPATCHES} submissions one after another`,
  );
  await spawnWorker(stack, `${stack.label}-dispatch`);
  const one = async () => {
    const started = wallMs();
    const { run } = await stack.api.submit("bench-ping", {});
    const answered = wallMs();
    const first = await stack.marks.wait(
      (m) => m.type === "first-step" && m.runId === run.runId,
      30_000,
      "the first step",
    );
    const done = await finished(stack, run.runId);
    return { toFirst: first.at - started, submit: answered - started, toEnd: done.at - started };
  };
  for (let i = 0; i < 5; i++) await one();
  const toFirst: number[] = [];
  const submit: number[] = [];
  const toEnd: number[] = [];
  for (let i = 0; i < DISPATCHES; i++) {
    const r = await one();
    toFirst.push(r.toFirst);
    submit.push(r.submit);
    toEnd.push(r.toEnd);
  }
  const unary: number[] = [];
  for (let i = 0; i < DISPATCHES; i++) {
    const started = performance.now();
    await stack.api.agents();
    unary.push(performance.now() - started);
  }
  const a = sorted(toFirst);
  const p50 = percentile(a, 50);
  const p99 = percentile(a, 99);
  console.log(
    `    submit to first step: p50 ${ms(p50, 2)}, p99 ${ms(p99, 2)} (min ${ms(a[0]!, 2)}, max ${ms(a.at(-1)!, 2)}); ` +
      `the submit call itself p50 ${ms(median(submit), 2)} ` +
      `(a call that writes nothing, ListAgents: ${ms(median(unary), 2)}); submit to the run's end recorded (1 step) p50 ${ms(median(toEnd), 2)}`,
  );
  if (fsync) {
    results.dispatchP50 = p50;
    results.dispatchP99 = p99;
  } else {
    results.dispatchDefaultP50 = p50;
    results.dispatchDefaultP99 = p99;
  }
  await killAll(stack);
}

// ---- 5. Six 4-second items on three workers ----

async function fanoutPhase(stack: Stack): Promise<void> {
  console.log(
    "\n[5] 6 items of one 4-second step on 3 worker processes (1 slot each): first submit to last finish",
  );
  await Promise.all([1, 2, 3].map((i) => spawnWorker(stack, `fan-${i}`)));
  const started = wallMs();
  const runs = await Promise.all(
    Array.from({ length: 6 }, () => stack.api.submit("bench-sleeper", { ms: 4_000 })),
  );
  const submitted = wallMs();
  const ends = await Promise.all(runs.map(({ run }) => finished(stack, run.runId, started, 60_000)));
  const wall = Math.max(...ends.map((e) => e.at)) - started;
  console.log(
    `    ${s(wall, 3)} (the 2 x 4 s floor + ${ms(wall - 8_000, 1)}); the 6 submits (at once) took ${ms(submitted - started, 1)}`,
  );
  // Each item: when its worker began it and when the worker had its end recorded (ms after the first submit).
  const items = runs.map(({ run }, i) => {
    const began = stack.marks.all((m) => m.type === "started" && m.runId === run.runId)[0]?.at ?? Number.NaN;
    return { began: began - started, ended: ends[i]!.at - started, worker: ends[i]!.from };
  });
  items.sort((x, y) => x.began - y.began);
  console.log(
    `    items (began..ended, ms after the first submit, worker): ${items.map((i) => `${i.began.toFixed(1)}..${i.ended.toFixed(1)} ${i.worker}`).join(", ")}`,
  );
  results.fanout = wall;
  await killAll(stack);
}

// ---- 6. Throughput from 1 to 4 workers ----

async function throughputPhase(stack: Stack): Promise<void> {
  console.log(
    `\n[6] Throughput: ${ITEMS} items of 10 steps x 20 ms, on 1 to 4 worker processes (1 slot each); items submitted at once`,
  );
  for (const n of [1, 2, 3, 4]) {
    await Promise.all(Array.from({ length: n }, (_, i) => spawnWorker(stack, `tp${n}-${i + 1}`)));
    const started = wallMs();
    const runs = await Promise.all(
      Array.from({ length: ITEMS }, () =>
        stack.api.submit("bench-pages", { pages: 10, stepMs: 20, marks: false }),
      ),
    );
    const ends = await Promise.all(runs.map(({ run }) => finished(stack, run.runId, started, 120_000)));
    const wall = Math.max(...ends.map((e) => e.at)) - started;
    const perSecond = ITEMS / (wall / 1_000);
    results.throughput.push({ workers: n, perSecond });
    // The busiest worker runs ceil(ITEMS / n) items: what the ratio can be at best.
    const busiest = Math.ceil(ITEMS / n);
    const base = results.throughput[0]!.perSecond;
    console.log(
      `    ${n} worker${n === 1 ? " " : "s"}: ${perSecond.toFixed(2)} items/s (x${(perSecond / base).toFixed(2)} of 1 worker; ` +
        `at best x${(ITEMS / busiest).toFixed(2)}), ${s(wall, 2)} for ${ITEMS} items; the busiest worker's ${busiest} items sleep ${s(busiest * 200, 2)}`,
    );
    await killAll(stack);
  }
}

// ---- The table ----

function table(): void {
  const rows: [string, string, string, string, string, string, boolean | undefined][] = [];
  const goal = (value: number, limit: number) => (Number.isFinite(value) ? value <= limit : undefined);
  rows.push([
    "per step, fsynced (worker side)",
    ms(results.stepFsync),
    "1.94 ms",
    "2.45 ms",
    "",
    "<= 1 ms",
    goal(results.stepFsync, 1),
  ]);
  rows.push(["per step, fsynced (submit to finish)", ms(results.stepFsyncClient), "", "", "", "", undefined]);
  rows.push(["per step, nats default sync (worker)", ms(results.stepDefault), "", "", "", "", undefined]);
  rows.push([
    "reuse per step, warm",
    ms(results.reuseWarm, 4),
    "0.057 ms",
    "0.57 ms",
    "",
    "<= 0.05 ms",
    goal(results.reuseWarm, 0.05),
  ]);
  rows.push(["  of which SDK lookup (warm)", ms(results.reuseWarmSdk, 4), "", "", "", "", undefined]);
  rows.push([
    "reuse per step, after kill -9 worker",
    ms(results.reuseKill, 4),
    "0.38 ms",
    "",
    "",
    "",
    undefined,
  ]);
  rows.push(["  of which SDK lookup (fresh worker)", ms(results.reuseKillSdk, 4), "", "", "", "", undefined]);
  rows.push([
    "reuse per step, after kill -9 scheduler",
    ms(results.reuseSchedulerKill, 4),
    "",
    "",
    "",
    "",
    undefined,
  ]);
  rows.push([
    "failover, kill -9 (dropped connection)",
    s(results.failoverDropped, 3),
    "0.64 s",
    "1.56 s",
    "",
    "<= 0.5 s",
    goal(results.failoverDropped, 500),
  ]);
  rows.push([
    `failover, SIGSTOP (lease ${LEASE_MS / 1_000} s)`,
    s(results.failoverHung, 3),
    "",
    "",
    "",
    "",
    undefined,
  ]);
  rows.push([
    "dispatch, submit to first step p50",
    ms(results.dispatchP50, 2),
    "5.98 ms",
    "461 ms",
    "",
    "<= 3 ms",
    goal(results.dispatchP50, 3),
  ]);
  rows.push(["dispatch p99", ms(results.dispatchP99, 2), "", "", "", "", undefined]);
  rows.push([
    "dispatch p50 / p99, default sync",
    `${ms(results.dispatchDefaultP50, 2)} / ${ms(results.dispatchDefaultP99, 2)}`,
    "",
    "",
    "",
    "",
    undefined,
  ]);
  rows.push([
    "6 x 4 s items on 3 workers",
    s(results.fanout, 3),
    "",
    "",
    "8.1 s",
    "<= 8.05 s",
    goal(results.fanout, 8_050),
  ]);
  const tp = results.throughput;
  if (tp.length > 0) {
    rows.push([
      "throughput items/s, 1..4 workers",
      tp.map((t) => t.perSecond.toFixed(1)).join(" / "),
      "",
      "",
      "",
      "",
      undefined,
    ]);
    rows.push([
      "  ratio to 1 worker",
      tp.map((t) => `x${(t.perSecond / tp[0]!.perSecond).toFixed(2)}`).join(" / "),
      "",
      "",
      "",
      "",
      undefined,
    ]);
  }
  const head = ["", "Holdfast (this run)", "Restate 1.7", "DBOS + Postgres", "Papayya", "goal", ""];
  const widths = [40, 22, 12, 16, 9, 11, 7];
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(" ");
  console.log(`\n${line(head)}`);
  for (const [what, ours, restate, dbos, papayya, target, met] of rows) {
    console.log(
      line([
        what,
        ours,
        restate,
        dbos,
        papayya,
        target,
        met === undefined ? (target === "" ? "" : "n/a") : met ? "met" : "NOT met",
      ]),
    );
  }
  console.log(
    "\nPeers' figures as published (their machines, not this one). Holdfast's: this machine, every process of the stack,",
  );
  console.log(
    "the workers and this client sharing its CPUs; the fsynced stack unless said (phases 2, 3, 5, 6 ran on it).",
  );
}

// ---- Main ----

async function main(): Promise<void> {
  const probeDir = mkdtempSync(join(tmpdir(), "holdfast-bench-durable-probe-"));
  const probe = sorted(fsyncProbe(probeDir));
  rmSync(probeDir, { recursive: true, force: true });
  console.log(
    `Holdfast durable-runs benchmark — ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}; scheduler.lease_ms ${LEASE_MS}`,
  );
  console.log(
    `This disk (${tmpdir()}): write + fsync of 200 bytes p50 ${ms(percentile(probe, 50))}, p99 ${ms(percentile(probe, 99))}: the floor of a step fsynced.`,
  );
  console.log(
    `Load average before: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  );
  const fsyncStack = await startStack("fsync", true);
  try {
    if (PHASES.has("steps")) await perStep(fsyncStack, true);
    if (PHASES.has("reuse")) await reusePhase(fsyncStack);
    if (PHASES.has("failover")) await failoverPhase(fsyncStack);
    if (PHASES.has("dispatch")) await dispatchPhase(fsyncStack, true);
    if (PHASES.has("fanout")) await fanoutPhase(fsyncStack);
    if (PHASES.has("throughput")) await throughputPhase(fsyncStack);
    if (PHASES.has("reuse")) await schedulerKillPhase(fsyncStack);
  } finally {
    await stopStack(fsyncStack);
  }
  if (PHASES.has("default")) {
    console.log("\nA second stack: nats-server with its default sync (no sync_interval set)");
    const defaultStack = await startStack("default", false);
    try {
      if (PHASES.has("steps")) await perStep(defaultStack, false);
      if (PHASES.has("dispatch")) await dispatchPhase(defaultStack, false);
    } finally {
      await stopStack(defaultStack);
    }
  }
  table();
  console.log(
    `Load average after: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")} (1, 5, 15 min)`,
  );
}

async function cleanUp(): Promise<void> {
  for (const stack of [...stacks]) await stopStack(stack).catch(() => undefined);
}

process.once("SIGINT", () => {
  interrupted = true;
  console.log("\nInterrupted: stopping the stacks…");
  void cleanUp().then(() => process.exit(130));
});

try {
  await main();
} catch (error) {
  console.error(error);
  await cleanUp();
  process.exitCode = 1;
}
// gRPC channels and the NATS connection are closed; whatever else lingers does not hold the process.
process.exit();
