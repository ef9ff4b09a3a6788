import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadConfig } from "@holdfast/config";
import {
  ActorKind,
  createIdGenerator,
  LimitKind,
  ReleaseReason,
  RunFailure,
  type StoredEnvelope,
} from "@holdfast/events";
import { createLogger } from "@holdfast/log";
import { Ledger, runAggregate } from "@holdfast/runs";
import { type RunningScheduler, startScheduler } from "@holdfast/scheduler";
import { agent, DurableStatus, type HoldfastWorker, NonRetriable, RunsApi, worker } from "@holdfast/sdk";
import { freePort, makeTempDir, waitFor } from "@holdfast/test-harness";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { blocker, pages as pagesAgent } from "./durable-agents.js";
import { type Stack, sleep, startStack } from "./stack.js";

// Durable runs end to end: the scheduler in this process over the harness's nats-server,
// workers in this process (their code's effects counted in closures) or as processes of
// their own (to be killed, stopped or blocked), model calls through the gateway to the
// fake provider.

const WORKER_SCRIPT = fileURLToPath(new URL("../dist/durable-worker.js", import.meta.url));
const LEASE_MS = 3_000;
const operator = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "test" };

let stack: Stack;
let scheduler: RunningScheduler;
let api: RunsApi;
let dir: Awaited<ReturnType<typeof makeTempDir>>;
const workers: HoldfastWorker[] = [];
const children: ChildProcess[] = [];

// A provider key with a small window: 1,000 tokens refilled in 10 s (100 a second). Each
// model call of the metered agent takes about 590, and the gateway asks the window for its
// estimate with a margin (the whole window, while the run's calls are too few to say how
// much they vary): after one call, the next waits some 6 s, however long the first took to
// record, well past the 2 s the gateway waits before it checkpoints the run.
const KEY_SMALL_WINDOW = "sk-durable-window-000000000000000000";
const SMALL_WINDOW = { tokens: 1_000, ms: 10_000 };
// For runs held back before they start: 3,000 tokens refilled in 15 s (200 a second), half
// of which one call of the agent that spends it takes (about 1,560).
const KEY_START_WINDOW = "sk-durable-start-0000000000000000000";
const START_WINDOW = { tokens: 3_000, ms: 15_000 };

beforeAll(async () => {
  stack = await startStack({
    // The fake's windows refill continuously, as its operator declares.
    windowShape: "continuous",
    config: { predict: { wait_threshold_s: 2, max_wait_s: 20 }, hold: { keepalive_ms: 1_000 } },
    provider: {
      limitsByKey: {
        [KEY_SMALL_WINDOW]: { tpm: SMALL_WINDOW.tokens, windowMs: SMALL_WINDOW.ms },
        [KEY_START_WINDOW]: { tpm: START_WINDOW.tokens, windowMs: START_WINDOW.ms },
      },
    },
  });
  dir = await makeTempDir("durable");
  const config = loadConfig({
    env: {},
    overrides: {
      ...stack.configFor("scheduler"),
      scheduler: {
        host: "127.0.0.1",
        grpc_port: 0,
        port: 0,
        lease_ms: LEASE_MS,
        gateway_url: new URL(stack.gatewayUrl).origin,
      },
    },
  });
  scheduler = await startScheduler(config, createLogger({ name: "scheduler", level: "warn" }));
  api = new RunsApi({ scheduler: scheduler.grpcAddress });
  // What the worker processes serve.
  await api.deploy(pagesAgent);
  await api.deploy(blocker);
});

afterEach(async () => {
  for (const w of workers.splice(0)) await w.stop();
  for (const child of children.splice(0)) {
    child.kill("SIGKILL");
  }
});

afterAll(async () => {
  api.close();
  await scheduler.close();
  await stack.close();
  await dir[Symbol.asyncDispose]();
});

async function serve(...agents: Parameters<typeof worker>[0]["agents"]): Promise<HoldfastWorker> {
  const w = await worker({
    agents,
    scheduler: scheduler.grpcAddress,
    retryDelaysMs: [10, 20, 40, 80],
    name: `in-process-${workers.length + 1}`,
  });
  workers.push(w);
  return w;
}

/** A worker process (test/e2e/src/durable-worker.ts); resolves once it is connected. */
async function spawnWorker(name: string, env: Record<string, string> = {}): Promise<ChildProcess> {
  const child = spawn(process.execPath, [WORKER_SCRIPT], {
    env: { ...process.env, SCHEDULER: scheduler.grpcAddress, NAME: name, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let output = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on("data", (chunk: Buffer) => {
      if (chunk.toString().includes("worker ready")) resolve();
    });
    child.once("exit", (code) =>
      reject(new Error(`worker ${name} exited (${code}) before it was ready: ${output}`)),
    );
  });
  return child;
}

async function events(runId: string): Promise<StoredEnvelope[]> {
  return (await stack.bus.readRun(runId)).events.map((e) => e.envelope);
}

function ofType(all: StoredEnvelope[], type: string): StoredEnvelope[] {
  return all.filter((e) => e.type === type);
}

describe("durable runs", () => {
  it("re-drives a 40-step item that failed at step 17, reusing the 16 steps before it, and hands back what they returned", async () => {
    const executed: number[] = [];
    let broken = true;
    // Each page's result depends on when it ran: reused, it must be the one recorded.
    const pages = agent<{ pages: number }, { results: string[] }>(
      { name: "forty-pages", version: "v1" },
      async (run, input) => {
        const results: string[] = [];
        for (let page = 1; page <= input.pages; page++) {
          results.push(
            await run.step(
              "page",
              () => {
                executed.push(page);
                if (page === 17 && broken) throw new NonRetriable("page 17 cannot be parsed");
                return `page ${page} read at ${performance.now()}`;
              },
              { retries: 0 },
            ),
          );
        }
        return { results };
      },
    );
    await api.deploy(pages);
    await serve(pages);
    const { run } = await api.submit("forty-pages", { pages: 40 });
    const failed = await api.result(run.runId);
    expect(failed.status).toBe(DurableStatus.DURABLE_STATUS_FAILED);
    expect(failed.failedStep).toBe("page");
    expect(failed.error).toMatch(/page 17 cannot be parsed/);
    expect(executed).toEqual(Array.from({ length: 17 }, (_, i) => i + 1));
    const before = (await events(run.runId))
      .filter((e) => e.type === "StepRecorded")
      .map((e) => (e.payload?.$case === "stepRecorded" ? e.payload.value.resultJson : ""));

    broken = false;
    executed.length = 0;
    await api.redrive(run.runId, "fixed the parser");
    const done = await api.result(run.runId);
    expect(done.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    // Pages 1-16 were not run again; 17 to 40 were.
    expect(executed).toEqual(Array.from({ length: 24 }, (_, i) => i + 17));
    const output = JSON.parse(done.outputJson) as { results: string[] };
    expect(output.results.slice(0, 16)).toEqual(before.slice(0, 16).map((json) => JSON.parse(json)));
    const leased = ofType(await events(run.runId), "RunLeased").at(-1);
    expect(leased?.payload?.$case === "runLeased" && leased.payload.value.reusableSteps).toBe(16);
    expect(done.redrives).toBe(1);
    expect(done.steps.filter((s) => s.ok)).toHaveLength(40);
  });

  it("retries a raising step before the run fails, records every attempt, and stops at NonRetriable or retries: 0", async () => {
    let flaky = 0;
    let never = 0;
    const retrying = agent({ name: "retrying", version: "v1" }, async (run) => {
      const value = await run.step("flaky", () => {
        flaky += 1;
        if (flaky < 3) throw new Error(`blip ${flaky}`);
        return "ok";
      });
      await run.step(
        "once",
        () => {
          never += 1;
          throw new Error("not again");
        },
        { retries: 0 },
      );
      return value;
    });
    await api.deploy(retrying);
    await serve(retrying);
    const { run } = await api.submit("retrying", {});
    const failed = await api.result(run.runId);
    expect(failed.status).toBe(DurableStatus.DURABLE_STATUS_FAILED);
    expect(flaky).toBe(3);
    expect(never).toBe(1);
    const flakyStep = failed.steps.find((s) => s.label === "flaky");
    expect(flakyStep).toMatchObject({ ok: true, attempts: 3 });
    const attempts = ofType(await events(run.runId), "StepRecorded").map((e) =>
      e.payload?.$case === "stepRecorded"
        ? [e.payload.value.label, e.payload.value.attempt, e.payload.value.ok]
        : [],
    );
    expect(attempts).toEqual([
      ["flaky", 1, false],
      ["flaky", 2, false],
      ["flaky", 3, true],
      ["once", 1, false],
    ]);
    expect(failed.failure).toBe(RunFailure.RUN_FAILURE_ERROR);
  });

  it("runs a turn's tool calls at once, each its own step, and a re-drive reruns only those that did not finish", async () => {
    const calls: string[] = [];
    let failing = true;
    let inFlight = 0;
    let most = 0;
    const tools = agent({ name: "tools", version: "v1" }, async (run) => {
      const results = await run.parallel(
        ["search", "fetch", "summarize"].map((name) => ({
          label: `tool:${name}`,
          retries: 0,
          fn: async () => {
            calls.push(name);
            inFlight += 1;
            most = Math.max(most, inFlight);
            await sleep(100);
            inFlight -= 1;
            if (name === "fetch" && failing) throw new NonRetriable("fetch timed out");
            return `${name} result`;
          },
        })),
      );
      return results;
    });
    await api.deploy(tools);
    await serve(tools);
    const { run } = await api.submit("tools", {});
    const failed = await api.result(run.runId);
    expect(failed.status).toBe(DurableStatus.DURABLE_STATUS_FAILED);
    expect(most).toBe(3);
    expect(calls.sort()).toEqual(["fetch", "search", "summarize"]);
    failing = false;
    calls.length = 0;
    await api.redrive(run.runId);
    const done = await api.result(run.runId);
    expect(done.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    expect(calls).toEqual(["fetch"]);
    expect(JSON.parse(done.outputJson)).toEqual(["search result", "fetch result", "summarize result"]);
  });

  it("replays a run on a new version reusing nothing, and the run's record says so", async () => {
    const ran: string[] = [];
    const make = (version: string) =>
      agent({ name: "versioned", version }, async (run) => {
        const a = await run.step("a", () => {
          ran.push(`${version}:a`);
          return version;
        });
        const b = await run.step("b", () => {
          ran.push(`${version}:b`);
          return version;
        });
        return `${a}/${b}`;
      });
    const v1 = make("v1");
    await api.deploy(v1);
    await serve(v1);
    const { run } = await api.submit("versioned", {});
    expect((await api.result(run.runId)).outputJson).toBe('"v1/v1"');
    const v2 = make("v2");
    const deployed = await api.deploy(v2);
    expect(deployed.changes).toEqual(["version: v1 -> v2"]);
    expect(deployed.previousVersion).toBe("v1");
    await serve(v2);
    ran.length = 0;
    await api.replay(run.runId, "new prompt");
    const replayed = await api.result(run.runId);
    expect(replayed.outputJson).toBe('"v2/v2"');
    expect(ran).toEqual(["v2:a", "v2:b"]);
    expect(replayed.version).toBe("v2");
    expect(replayed.replays).toBe(1);
    const redriven = ofType(await events(run.runId), "RunRedriven")[0];
    expect(redriven?.payload?.$case === "runRedriven" && redriven.payload.value).toMatchObject({
      replay: true,
      version: "v2",
      reason: "new prompt",
    });
  });

  it("resumes a run whose worker was SIGKILLed mid-step on another worker, from its last checkpoint: no finished step runs twice", async () => {
    const executions = join(dir.path, "killed.log");
    writeFileSync(executions, "");
    const first = await spawnWorker("doomed", { EXECUTIONS: executions, STEP_MS: "60" });
    const { run } = await api.submit("pages", { pages: 30 });
    await waitFor(() => readFileSync(executions, "utf8").split("\n").length > 10, {
      timeoutMs: 20_000,
      message: "the first worker did not get going",
    });
    first.kill("SIGKILL");
    const killedAt = Date.now();
    await spawnWorker("survivor", { EXECUTIONS: executions, STEP_MS: "60" });
    const done = await api.result(run.runId);
    expect(done.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    expect(JSON.parse(done.outputJson)).toEqual({ sum: (30 * 31) / 2 });
    const all = await events(run.runId);
    const released = ofType(all, "RunReleased")[0];
    expect(released?.payload?.$case === "runReleased" && released.payload.value.reason).toBe(
      ReleaseReason.RELEASE_REASON_WORKER_GONE,
    );
    // Released as the connection dropped, not after a lease ran out.
    expect(released!.timestampMs - killedAt).toBeLessThan(LEASE_MS);
    // Every page ran once but the one in flight when the worker died (recorded once, by the survivor).
    const lines = readFileSync(executions, "utf8")
      .trim()
      .split("\n")
      .filter((l) => l.startsWith(run.runId));
    const counts = new Map<string, number>();
    for (const line of lines) {
      const page = line.split(" ")[1]!;
      counts.set(page, (counts.get(page) ?? 0) + 1);
    }
    const twice = [...counts].filter(([, n]) => n > 1);
    expect(twice.length).toBeLessThanOrEqual(1);
    expect(counts.size).toBe(30);
    const recorded = ofType(all, "StepRecorded");
    expect(recorded).toHaveLength(30);
    expect(
      new Set(recorded.map((e) => (e.payload?.$case === "stepRecorded" ? e.payload.value.ordinal : 0))).size,
    ).toBe(30);
  });

  it("takes a run from a worker that stopped beating once its lease expires, and fences off that worker's late writes", async () => {
    const executions = join(dir.path, "hung.log");
    writeFileSync(executions, "");
    const hung = await spawnWorker("hung", { EXECUTIONS: executions, STEP_MS: "200" });
    const { run } = await api.submit("pages", { pages: 12 });
    await waitFor(() => readFileSync(executions, "utf8").includes(`${run.runId} page#3`), {
      timeoutMs: 20_000,
      message: "the worker did not get going",
    });
    hung.kill("SIGSTOP");
    const stoppedAt = Date.now();
    await spawnWorker("healthy", { EXECUTIONS: executions, STEP_MS: "20" });
    await waitFor(async () => ofType(await events(run.runId), "RunReleased").length > 0, {
      timeoutMs: LEASE_MS * 4,
      message: "the hung worker's lease never expired",
    });
    const released = ofType(await events(run.runId), "RunReleased")[0]!;
    expect(released.payload?.$case === "runReleased" && released.payload.value.reason).toBe(
      ReleaseReason.RELEASE_REASON_LEASE_EXPIRED,
    );
    expect(released.timestampMs - stoppedAt).toBeGreaterThanOrEqual(LEASE_MS - 500);
    const done = await api.result(run.runId);
    expect(done.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    // The hung worker wakes up: whatever it reports now is refused, and the record stands.
    hung.kill("SIGCONT");
    await sleep(1_000);
    const recorded = ofType(await events(run.runId), "StepRecorded");
    expect(recorded).toHaveLength(12);
    expect((await api.get(run.runId)).status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
  });

  it("fails a run past its ceiling while its step holds the event loop, and ends the blocked worker", async () => {
    const blocked = await spawnWorker("blocked", { GRACE_MS: "1000" });
    const exited = new Promise<string>((resolve) =>
      blocked.once("exit", (code, signal) => resolve(String(signal ?? code))),
    );
    const { run } = await api.submit("blocker", { ms: 30_000 }, { timeoutSeconds: 2 });
    const started = Date.now();
    const failed = await api.result(run.runId);
    const tookMs = Date.now() - started;
    expect(failed.status).toBe(DurableStatus.DURABLE_STATUS_FAILED);
    expect(failed.failure).toBe(RunFailure.RUN_FAILURE_TIMEOUT);
    expect(failed.error).toMatch(/more than 2 s/);
    // On time, although the worker's event loop never came back.
    expect(tookMs).toBeLessThan(8_000);
    // Its beating thread ended the process once the run was no longer its own.
    expect(await exited).toBe("SIGKILL");
  });

  it("lets a held run's worker go (no worker waits on a human), and resumes it from its ledger", async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const ran: string[] = [];
    const waiting = agent({ name: "waits-on-a-human", version: "v1" }, async (run) => {
      await run.step("before", () => {
        ran.push("before");
        return 1;
      });
      await run.step("slow", async ({ signal }) => {
        ran.push("slow");
        await Promise.race([gate, new Promise((resolve) => signal.addEventListener("abort", resolve))]);
        return 2;
      });
      return "done";
    });
    const quick = agent({ name: "quick", version: "v1" }, async (run) => run.step("only", () => "quick"));
    await api.deploy(waiting);
    await api.deploy(quick);
    const w = await serve(waiting, quick);
    const { run } = await api.submit("waits-on-a-human", {});
    await waitFor(() => ran.includes("slow"), { timeoutMs: 10_000, message: "the run did not start" });
    const operatorLedger = new Ledger({
      aggregate: runAggregate,
      bus: stack.bus,
      log: createLogger({ name: "operator", level: "silent" }),
      clock: Date.now,
      newId: createIdGenerator(),
    });
    await operatorLedger.execute(
      run.runId,
      { tag: "", tenant: "" },
      { type: "HoldRun", actor: operator, reason: "look" },
    );
    await waitFor(async () => (await api.get(run.runId)).status === DurableStatus.DURABLE_STATUS_HELD, {
      timeoutMs: 10_000,
      message: "the run was not held",
    });
    // The worker (one slot) is free: another run goes on while this one is held.
    const other = await api.submit("quick", {});
    expect((await api.result(other.run.runId)).status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    expect(w.running).toBe(0);
    const released = ofType(await events(run.runId), "RunReleased")[0];
    expect(released?.payload?.$case === "runReleased" && released.payload.value.reason).toBe(
      ReleaseReason.RELEASE_REASON_HELD,
    );
    release();
    ran.length = 0;
    await operatorLedger.execute(
      run.runId,
      { tag: "", tenant: "" },
      {
        type: "ResumeRun",
        actor: operator,
        reason: "go on",
        onlyIfHeld: true,
      },
    );
    const done = await api.result(run.runId);
    expect(done.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    // Resumed from its ledger: the step before the hold was not run again.
    expect(ran).toEqual(["slow"]);
  });

  it("runs at most concurrency_per_key of one tenant's items at once, while another tenant's run alongside", async () => {
    const running = new Map<string, number>();
    const most = new Map<string, number>();
    const capped = agent(
      { name: "capped", version: "v1", concurrencyPerKey: 1 },
      async (run, input: { tenant: string }) => {
        await run.step("work", async () => {
          const now = (running.get(input.tenant) ?? 0) + 1;
          running.set(input.tenant, now);
          most.set(input.tenant, Math.max(most.get(input.tenant) ?? 0, now));
          await sleep(150);
          running.set(input.tenant, (running.get(input.tenant) ?? 1) - 1);
          return 1;
        });
      },
    );
    await api.deploy(capped);
    for (let i = 0; i < 3; i++) {
      const w = await worker({ agents: [capped], scheduler: scheduler.grpcAddress, slots: 2 });
      workers.push(w);
    }
    const submitted = [];
    for (let i = 0; i < 4; i++) {
      submitted.push(
        await api.submit("capped", { tenant: "acme" }, { tenant: "acme", partitionKey: "customer-1" }),
      );
      submitted.push(
        await api.submit("capped", { tenant: "globex" }, { tenant: "globex", partitionKey: "customer-1" }),
      );
    }
    const results = await Promise.all(submitted.map((s) => api.result(s.run.runId)));
    expect(results.every((r) => r.status === DurableStatus.DURABLE_STATUS_FINISHED)).toBe(true);
    expect(most.get("acme")).toBe(1);
    expect(most.get("globex")).toBe(1);
  });

  it("sends a step's model calls through the gateway under the run's id, metered against it", async () => {
    const caller = agent({ name: "caller", version: "v1" }, async (run) => {
      const openai = await run.openai({ apiKey: "sk-test-durable" });
      const reply = await run.step("model", async () => {
        const completion = await openai.chat.completions.create({
          model: "gpt-4o-mini",
          messages: [{ role: "user", content: "Say something about lighthouses." }],
        });
        return completion.choices[0]?.message.content ?? "";
      });
      return reply;
    });
    await api.deploy(caller);
    await serve(caller);
    const { run } = await api.submit("caller", {});
    const done = await api.result(run.runId);
    expect(done.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    expect(JSON.parse(done.outputJson)).toMatch(/lighthouses/);
    const view = await stack.settled(run.runId, 1);
    expect(view.steps).toHaveLength(1);
    expect(view.steps[0]?.status).toBe("completed");
    expect((await api.get(run.runId)).modelCalls).toBe(1);
  });

  it("lets go of a run whose next model call cannot fit its key's window (a checkpoint), and re-drives it from its ledger when the window allows", async () => {
    const calls: number[] = [];
    const CALLS = 3;
    const metered = agent({ name: "metered", version: "v1" }, async (run) => {
      const openai = await run.openai({ apiKey: KEY_SMALL_WINDOW });
      let answered = 0;
      for (let i = 1; i <= CALLS; i++) {
        await run.step("model", async () => {
          calls.push(i);
          const reply = await openai.chat.completions.create({
            model: "gpt-4o-mini",
            max_tokens: 44,
            messages: [
              {
                role: "user",
                content: `${i} ${"The keeper climbs the stairs to light the lamp. ".repeat(45)}`,
              },
            ],
          });
          return reply.choices[0]?.message.content ?? "";
        });
        answered += 1;
      }
      return answered;
    });
    const quick = agent({ name: "quick-while-waiting", version: "v1" }, async (run) =>
      run.step("only", () => 1),
    );
    await api.deploy(metered);
    await api.deploy(quick);
    const w = await serve(metered, quick);
    const { run } = await api.submit("metered", {});
    // The second call is checkpointed: the run is held and its worker let go of it.
    await waitFor(async () => ofType(await events(run.runId), "RunReleased").length > 0, {
      timeoutMs: 30_000,
      message: "the run was not let go when its window ran out",
    });
    // Meanwhile the worker (one slot) is free for other work.
    const other = await api.submit("quick-while-waiting", {});
    expect((await api.result(other.run.runId)).status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    const done = await api.result(run.runId);
    expect(done.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    expect(JSON.parse(done.outputJson)).toBe(CALLS);
    const all = await events(run.runId);
    const tripped = ofType(all, "RunTripped")[0];
    expect(tripped?.payload?.$case === "runTripped" && tripped.payload.value.trip?.limit).toBe(
      LimitKind.LIMIT_KIND_RATE_LIMIT,
    );
    // Each checkpoint let go of the worker, and the window's own timer resumed the run.
    const released = ofType(all, "RunReleased").map((e) =>
      e.payload?.$case === "runReleased" ? e.payload.value.reason : undefined,
    );
    expect(released.length).toBeGreaterThanOrEqual(1);
    expect(released.every((reason) => reason === ReleaseReason.RELEASE_REASON_HELD)).toBe(true);
    expect(ofType(all, "CheckpointCleared")).toHaveLength(released.length);
    // Re-driven from its ledger each time: each lease reused every step recorded before it,
    // and only the step a checkpoint interrupted ran again.
    const leases = ofType(all, "RunLeased");
    expect(leases).toHaveLength(released.length + 1);
    for (const lease of leases) {
      const recorded = all.filter(
        (e) =>
          e.type === "StepRecorded" &&
          e.payload?.$case === "stepRecorded" &&
          e.payload.value.ok &&
          e.sequence < lease.sequence,
      );
      expect(lease.payload?.$case === "runLeased" && lease.payload.value.reusableSteps).toBe(recorded.length);
    }
    expect(calls).toHaveLength(CALLS + released.length);
    expect(new Set(calls).size).toBe(CALLS);
    // No 429 from the provider: the wall was seen coming.
    const mine = stack.provider.requests.filter((r) => r.apiKey === KEY_SMALL_WINDOW);
    expect(mine.filter((r) => r.status === 429)).toHaveLength(0);
    expect(mine.filter((r) => r.status === 200)).toHaveLength(CALLS);
    expect(w.running).toBe(0);
  }, 60_000);

  it("does not start a run while its agent's key window cannot fit its next model call", async () => {
    // A model no other test here calls: what the estimator knows of it is this test's alone.
    const spender = agent(
      { name: "spends-its-window", version: "v1" },
      async (run, input: { calls: number }) => {
        const openai = await run.openai({ apiKey: KEY_START_WINDOW });
        for (let i = 1; i <= input.calls; i++) {
          await run.step("model", async () => {
            const reply = await openai.chat.completions.create({
              model: "gpt-4o",
              max_tokens: 44,
              messages: [
                {
                  role: "user",
                  content: `${i} ${"The keeper climbs the stairs to light the lamp. ".repeat(125)}`,
                },
              ],
            });
            return reply.choices[0]?.message.content ?? "";
          });
        }
        return input.calls;
      },
    );
    await api.deploy(spender);
    await serve(spender);
    // A first run's one call takes half of the key's full window, and teaches the scheduler
    // what a call of this agent costs: its estimate with its margin (for a model nothing is
    // known of yet, three quarters of the estimate again).
    const first = await api.submit(spender.name, { calls: 1 });
    expect((await api.result(first.run.runId)).status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    const taught = ofType(await events(first.run.runId), "StepStarted")[0];
    const prediction = taught?.payload?.$case === "stepStarted" ? taught.payload.value.prediction : undefined;
    expect(prediction?.keyId).toHaveLength(16);
    // What the scheduler holds the agent's next run back for (a margin past the whole window cut to it).
    const need = Math.min(
      START_WINDOW.tokens,
      Number(prediction!.estimatedTotalTokens) + prediction!.k * Number(prediction!.sigma),
    );
    const [spent] = stack.provider.requests.filter((r) => r.apiKey === KEY_START_WINDOW);
    const { usage } = JSON.parse(spent!.responseBody) as { usage: { total_tokens: number } };
    // What it left cannot take another such call: the window must refill first, at its rate,
    // from when the provider took the call.
    const left = START_WINDOW.tokens - usage.total_tokens;
    expect(need).toBeGreaterThan(left);
    const roomAtMs = spent!.receivedAt + ((need - left) * START_WINDOW.ms) / START_WINDOW.tokens;
    // The next run waits in the queue, not in the gateway, until the window has room for its first call.
    const second = await api.submit(spender.name, { calls: 1 });
    expect((await api.result(second.run.runId)).status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    const all = await events(second.run.runId);
    // Submitted while the window was short of its call ...
    expect(ofType(all, "RunSubmitted")[0]!.timestampMs).toBeLessThan(roomAtMs);
    // ... it was leased no sooner than the window had room, once, and its call went on.
    const leases = ofType(all, "RunLeased");
    expect(leases).toHaveLength(1);
    expect(leases[0]!.timestampMs).toBeGreaterThanOrEqual(roomAtMs);
    expect(ofType(all, "RunTripped")).toHaveLength(0);
    const mine = stack.provider.requests.filter((r) => r.apiKey === KEY_START_WINDOW);
    expect(mine.map((r) => r.status)).toEqual([200, 200]);
  }, 90_000);

  it("re-drives a run whose recorded steps together are far past gRPC's 4 MiB message default", async () => {
    let broken = true;
    // Twelve steps of 400 KiB each: the re-drive's assignment carries 4.7 MiB of them.
    const bulky = agent({ name: "bulky", version: "v1" }, async (run) => {
      let bytes = 0;
      for (let i = 0; i < 12; i++) bytes += (await run.step("chunk", () => "x".repeat(400 * 1024))).length;
      await run.step(
        "last",
        () => {
          if (broken) throw new NonRetriable("not yet");
          return "ok";
        },
        { retries: 0 },
      );
      return bytes;
    });
    await api.deploy(bulky);
    await serve(bulky);
    const { run } = await api.submit("bulky", {});
    expect((await api.result(run.runId)).status).toBe(DurableStatus.DURABLE_STATUS_FAILED);
    broken = false;
    await api.redrive(run.runId);
    const done = await api.result(run.runId);
    expect(done.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
    expect(JSON.parse(done.outputJson)).toBe(12 * 400 * 1024);
    const leased = ofType(await events(run.runId), "RunLeased").at(-1);
    expect(leased?.payload?.$case === "runLeased" && leased.payload.value.reusableSteps).toBe(12);
    // A finished run cannot be cancelled: the answer says why, and the run is as it was.
    await expect(api.cancel(run.runId, "too late")).rejects.toMatchObject({
      code: 9 /* FAILED_PRECONDITION */,
    });
    expect((await api.get(run.runId)).status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
  });

  it("fails a step that returns what JSON cannot hold, saying what it was", async () => {
    const odd = agent({ name: "returns-a-function", version: "v1" }, async (run) =>
      run.step("make", () => (() => 1) as unknown as string),
    );
    await api.deploy(odd);
    await serve(odd);
    const { run } = await api.submit("returns-a-function", {});
    const failed = await api.result(run.runId);
    expect(failed.status).toBe(DurableStatus.DURABLE_STATUS_FAILED);
    expect(failed.error).toMatch(
      /step make returned a value that cannot be recorded \(a function is not a JSON value\)/,
    );
    expect(failed.steps).toMatchObject([{ label: "make", attempts: 1, ok: false }]);
  });

  it("fails a step whose result is too large to record, with a clear error, rather than retrying it forever", async () => {
    const big = agent({ name: "big-result", version: "v1" }, async (run) =>
      run.step("fetch", () => "x".repeat(600 * 1024)),
    );
    await api.deploy(big);
    await serve(big);
    const { run } = await api.submit("big-result", {});
    const failed = await api.result(run.runId);
    expect(failed.status).toBe(DurableStatus.DURABLE_STATUS_FAILED);
    expect(failed.error).toMatch(/more than the 524288 a step may record/);
    expect(failed.steps).toMatchObject([{ label: "fetch", attempts: 1, ok: false }]);
  });

  it("rebuilds from the log when the scheduler restarts: its agents, a queued run, and a running run its worker still runs", async () => {
    const port = await freePort();
    const config = loadConfig({
      env: {},
      overrides: {
        ...stack.configFor("scheduler"),
        scheduler: {
          host: "127.0.0.1",
          grpc_port: port,
          port: 0,
          lease_ms: LEASE_MS,
          gateway_url: new URL(stack.gatewayUrl).origin,
        },
      },
    });
    const log = createLogger({ name: "scheduler-2", level: "warn" });
    let second = await startScheduler(config, log);
    const api2 = new RunsApi({ scheduler: second.grpcAddress });
    const steps: string[] = [];
    const slow = agent({ name: "survives-restart", version: "v1" }, async (run, input: { name: string }) => {
      let n = 0;
      for (let i = 1; i <= 10; i++) {
        n += await run.step("tick", async () => {
          steps.push(`${input.name}#${i}`);
          await sleep(80);
          return 1;
        });
      }
      return n;
    });
    await api2.deploy(slow);
    const w = await worker({ agents: [slow], scheduler: second.grpcAddress, retryDelaysMs: [50] });
    workers.push(w);
    try {
      const a = await api2.submit("survives-restart", { name: "a" });
      const b = await api2.submit("survives-restart", { name: "b" });
      await waitFor(() => steps.length >= 3, { timeoutMs: 10_000, message: "run a did not start" });
      // The scheduler goes away mid-run (b still queued) and a new one takes the same port.
      await second.close();
      second = await startScheduler(config, log);
      const [doneA, doneB] = await Promise.all([api2.result(a.run.runId), api2.result(b.run.runId)]);
      expect(doneA.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
      expect(doneB.status).toBe(DurableStatus.DURABLE_STATUS_FINISHED);
      expect(JSON.parse(doneA.outputJson)).toBe(10);
      // Every step of a recorded once.
      const recorded = ofType(await events(a.run.runId), "StepRecorded").map((e) =>
        e.payload?.$case === "stepRecorded" && e.payload.value.ok ? e.payload.value.ordinal : 0,
      );
      expect(recorded.filter((o) => o > 0).sort((x, y) => x - y)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      // Its worker said it still ran it: the run went on under the same lease.
      expect(
        ofType(await events(a.run.runId), "RunReleased").map(
          (e) => e.payload?.$case === "runReleased" && e.payload.value.reason,
        ),
      ).toEqual([]);
      // The deployment outlived the scheduler: the restarted one knows the agent.
      expect((await api2.agents()).find((d) => d.agent === "survives-restart")?.version).toBe("v1");
    } finally {
      await w.stop();
      api2.close();
      await second.close();
    }
  });

  it("answers REST: submit once per idempotency key, and get the run", async () => {
    const echo = agent({ name: "echo", version: "v1" }, async (run, input: { text: string }) =>
      run.step("echo", () => input.text.toUpperCase()),
    );
    await api.deploy(echo);
    await serve(echo);
    const base = `http://127.0.0.1:${new URL(scheduler.url).port}`;
    const submit = () =>
      fetch(`${base}/v1/agents/echo/runs`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": "order-42" },
        body: JSON.stringify({ input: { text: "tide" }, partition_key: "acme" }),
      });
    const first = await submit();
    expect(first.status).toBe(201);
    const { run } = (await first.json()) as { run: { run_id: string; status: string } };
    const second = await submit();
    expect(second.status).toBe(200);
    expect(((await second.json()) as { run: { run_id: string } }).run.run_id).toBe(run.run_id);
    await api.result(run.run_id);
    const got = (await (await fetch(`${base}/v1/runs/${encodeURIComponent(run.run_id)}`)).json()) as {
      run: { status: string; output: unknown; input: unknown; steps: { label: string }[] };
    };
    expect(got.run).toMatchObject({ status: "finished", output: "TIDE", input: { text: "tide" } });
    expect(got.run.steps.map((s) => s.label)).toEqual(["echo"]);
    const bad = await fetch(`${base}/v1/agents/nobody/runs`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(bad.status).toBe(404);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/not deployed/);
  });
});
