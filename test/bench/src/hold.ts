// pnpm bench:hold — holding at scale, and what limits and budgets cost a call.
//
// One run starts the fake provider and `holdfast up` (nats-server, projector, budget
// service, gateway) with limits and a budget configured, plus a second gateway process on
// the same log with neither. Then:
//   1. N held calls (BENCH_HELD, default 10,000) through the first gateway: a hold by
//      selector through the control API (a standing rule on a tag), then N streaming calls of N new runs of that tag, each parked at its
//      first call. Prints the time to park them all and the gateway's RSS per parked call.
//   2. Resume all: one selector resume through the control API (`holdfast resume --tag`),
//      which lifts the rule and resumes every run; prints the time until the gateway has
//      released every parked call (target: 2 s, "met"/"not met") and until every client
//      has its whole answer.
//   3. The latency a call pays for limits and budgets: the same load through the gateway
//      with them and the one without, side by side, at 1 and 32 connections.
// Knobs: BENCH_HELD, BENCH_WAVE (held calls sent at once, 1,000), BENCH_PHASE_MS, BENCH_LATENCY=0 (steps 1 and 2 only), BENCH_TRACE=1
// (the gateway's parked count as the resume goes). Linux only (RSS from /proc).
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { percentile, runPhase, SHAPE_LOADS, sleep } from "./load.js";
import { controlHeaders, readerHeaders, startExtraGateway, startProvider, startUp } from "./processes.js";

const HELD = Number(process.env.BENCH_HELD ?? 10_000);
const PHASE_MS = Number(process.env.BENCH_PHASE_MS ?? 4_000);
const WAVE = Number(process.env.BENCH_WAVE ?? 1_000);
const TAG = "bench-held";
/** The time within which resuming the fleet must release every parked call (issue 23). */
const RELEASE_TARGET_MS = 2_000;
/** BENCH_LATENCY=0 skips step 3 (while iterating on steps 1 and 2). */
const LATENCY = process.env.BENCH_LATENCY !== "0";

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "holdfast-bench-hold-"));
  const children: ChildProcess[] = [];
  try {
    const providerUrl = await startProvider(children);
    const configFile = join(dataDir, "holdfast.yaml");
    writeFileSync(
      configFile,
      [
        "limits: { max_cost_usd: 1000, max_steps: 1000000 }",
        'budgets: { "*": { daily_usd: 100000 } }',
        // Released calls queue for a pool of connections to the provider: opened 2,000 at
        // once, they overflowed the fake provider's accept backlog (511) and 3–5% of the
        // calls failed with "other side closed".
        "gateway: { upstream_connections: 256 }",
      ].join("\n"),
    );
    const { file: stack } = await startUp({ dataDir, providerUrl, configFile }, children);
    const gatewayOrigin = new URL(stack.gatewayUrl).origin;
    const gatewayPid = (await (
      await fetch(`${gatewayOrigin}/holdfast/health`, { headers: readerHeaders(dataDir) })
    ).json()) as { pid: number };

    console.log(
      `Holdfast hold benchmark — ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), node ${process.version}\n`,
    );

    // 1. Park N calls. One call first, not held, reads the provider key's window: with
    // nothing read of it, the first call of a fleet goes alone and the rest wait up to 5 s
    // for its answer (predict's probe), and a held probe would leave them waiting there,
    // not parked. Parked: the gateway's health counts every call in its parking lot.
    const parkedNow = async () =>
      (
        (await (
          await fetch(`${gatewayOrigin}/holdfast/health`, { headers: readerHeaders(dataDir) })
        ).json()) as { parked?: number }
      ).parked ?? Number.NaN;
    const warm = await fetch(`${gatewayOrigin}/v1/chat/completions`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        authorization: "Bearer sk-bench",
        "x-holdfast-run": "warm-up",
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "go" }] }),
    });
    if (!warm.ok) throw new Error(`the first call failed: ${warm.status} ${await warm.text()}`);
    const baseline = rssBytes(gatewayPid.pid);
    const holding = await fetch(`${stack.controlUrl}/holdfast/v1/hold`, {
      method: "POST",
      headers: { ...controlHeaders(dataDir), "content-type": "application/json" },
      body: JSON.stringify({ tag: TAG, reason: "bench" }),
    });
    if (!holding.ok) throw new Error(`the hold failed: ${holding.status} ${await holding.text()}`);
    await sleep(200);
    const agent = new Agent({ keepAlive: false, maxSockets: Number.POSITIVE_INFINITY });
    const answeredAt: number[] = [];
    const failures: string[] = [];
    const t0 = performance.now();
    // In waves of BENCH_WAVE calls, each parked before the next is sent: 10,000 first calls
    // at once, the gateway could not record 38% of them (503 holdfast_log_unavailable), and
    // what is measured here is the resume, not that.
    const calls: Promise<void>[] = [];
    for (let sent = 0; sent < HELD; ) {
      const wave = Math.min(WAVE, HELD - sent);
      for (let i = sent; i < sent + wave; i++) {
        calls.push(
          heldCall(`${gatewayOrigin}/v1/chat/completions`, `held-${i}`, agent, {
            answered: () => answeredAt.push(performance.now()),
            failed: (why) => failures.push(why),
          }),
        );
      }
      sent += wave;
      while ((await parkedNow()) + failures.length < sent) await sleep(100);
    }
    const parkMs = performance.now() - t0;
    await sleep(2_000);
    const held = rssBytes(gatewayPid.pid);
    console.log(`${HELD} calls parked (${failures.length} failed) in ${(parkMs / 1000).toFixed(2)} s`);
    console.log(
      `gateway RSS ${mb(baseline)} → ${mb(held)}: ${((held - baseline) / HELD / 1024).toFixed(1)} KiB per parked call`,
    );

    // 2. Resume all, as an operator would: one selector resume through the control API
    // (`holdfast resume --tag bench-held`), which lifts the standing rule and resumes every
    // held run it matches. Released: the gateway's health says no call is parked any more
    // (each is then on its way to the provider); delivered: every client has its answer.
    const t1 = performance.now();
    let releasedMs: number | undefined;
    const watching = (async () => {
      while (releasedMs === undefined) {
        const health = { parked: await parkedNow() };
        if (process.env.BENCH_TRACE === "1")
          console.log(
            `  ${(performance.now() - t1).toFixed(0)} ms parked ${health.parked} answered ${answeredAt.length}`,
          );
        if (health.parked === 0) releasedMs = performance.now() - t1;
        else await sleep(10);
      }
    })();
    const resumed = await fetch(`${stack.controlUrl}/holdfast/v1/resume`, {
      method: "POST",
      headers: { ...controlHeaders(dataDir), "content-type": "application/json" },
      body: JSON.stringify({ tag: TAG, reason: "bench done" }),
    });
    const answer = (await resumed.json()) as { runs?: unknown[] };
    const resumedMs = performance.now() - t1;
    if (!resumed.ok) throw new Error(`the resume failed: ${resumed.status} ${JSON.stringify(answer)}`);
    await watching;
    await Promise.all(calls);
    const deliveredMs = Math.max(...answeredAt) - t1;
    const released = releasedMs ?? Number.NaN;
    console.log(
      `resume --tag ${TAG}: ${answer.runs?.length ?? 0} runs resumed, the control API answered in ${(resumedMs / 1000).toFixed(2)} s`,
    );
    console.log(
      `  every parked call released ${(released / 1000).toFixed(2)} s after the resume request (target ≤ ${(RELEASE_TARGET_MS / 1000).toFixed(0)} s: ${released <= RELEASE_TARGET_MS ? "met" : "not met"})`,
    );
    console.log(
      `  every answer delivered ${(deliveredMs / 1000).toFixed(2)} s after the resume request (${answeredAt.length} answered, ${failures.length} failed${failures.length > 0 ? `: ${failures[0]}` : ""})`,
    );
    agent.destroy();

    if (!LATENCY) return;
    // 3. What limits and budgets cost a call: a second gateway on the same log without them.
    // Measured once the projector has caught up with the resumes' 30,000-odd events, so
    // neither side shares the machine with that work.
    const settleStart = performance.now();
    await projectionCaughtUp(stack.analyticsUrl, readerHeaders(dataDir));
    console.log(`(projection caught up ${((performance.now() - settleStart) / 1000).toFixed(1)} s later)`);
    const plain = await startExtraGateway(
      { dataDir, natsUrl: stack.natsUrl, providerUrl, instanceId: "bench-plain" },
      children,
    );
    console.log("\nOne call's latency, limits and a budget on against off (chat, non-streaming):");
    for (const concurrency of [1, 32]) {
      const base = {
        shape: SHAPE_LOADS[0]!,
        stream: false,
        concurrency,
        warmupMs: 1_000,
        measureMs: PHASE_MS,
      };
      // Runs of their own per side: a run both gateways wrote to would be shared, and a
      // shared run's outcomes are appended at once rather than batched (see Ledger.shared).
      const off = await runPhase({
        ...base,
        origin: plain.url,
        runOf: (i: number) => `latency-off-${concurrency}-${i % 64}`,
      });
      const on = await runPhase({
        ...base,
        origin: gatewayOrigin,
        runOf: (i: number) => `latency-on-${concurrency}-${i % 64}`,
      });
      const p = (r: typeof on, q: number) => percentile(r.latencies, q);
      console.log(
        `  c=${String(concurrency).padEnd(2)}  off p50 ${p(off, 50).toFixed(2)} ms p99 ${p(off, 99).toFixed(2)} ms ${(off.requests / off.seconds).toFixed(0)} req/s` +
          `   on p50 ${p(on, 50).toFixed(2)} ms p99 ${p(on, 99).toFixed(2)} ms ${(on.requests / on.seconds).toFixed(0)} req/s` +
          `   on − off p50 ${(p(on, 50) - p(off, 50)).toFixed(2)} ms (x${(p(on, 50) / p(off, 50)).toFixed(2)})` +
          `   errors ${off.errors}/${on.errors}`,
      );
    }
  } finally {
    for (const child of children.reverse()) child.kill("SIGINT");
    await sleep(2_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** Resolves once the projector's health says everything in the stream is projected. */
async function projectionCaughtUp(analyticsUrl: string, headers: Record<string, string>): Promise<void> {
  for (const deadline = Date.now() + 300_000; Date.now() < deadline; await sleep(250)) {
    const health = (await (await fetch(`${analyticsUrl}/health`, { headers })).json().catch(() => ({}))) as {
      stream_last_seq?: number;
      projected_seq?: number;
    };
    if (health.projected_seq !== undefined && health.projected_seq >= (health.stream_last_seq ?? 0)) return;
  }
  throw new Error("the projection did not catch up within 5 minutes");
}

/** A streaming call of a run tagged for holding: parked, then answered. */
function heldCall(
  url: string,
  runId: string,
  agent: Agent,
  on: { answered(): void; failed(why: string): void },
): Promise<void> {
  return new Promise((resolve) => {
    const body = JSON.stringify({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: "go" }],
    });
    const req = request(
      url,
      {
        method: "POST",
        agent,
        headers: {
          "content-type": "application/json",
          authorization: "Bearer sk-bench",
          "x-holdfast-run": runId,
          "x-holdfast-tag": TAG,
        },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          text += chunk;
        });
        res.on("end", () => {
          if (text.includes("[DONE]")) on.answered();
          else on.failed(`${runId}: ${res.statusCode} ${text.slice(0, 200)}`);
          resolve();
        });
        res.on("error", (error) => {
          on.failed(`${runId}: ${error.message}`);
          resolve();
        });
      },
    );
    req.on("error", (error) => {
      on.failed(`${runId}: ${error.message}`);
      resolve();
    });
    req.end(body);
  });
}

function rssBytes(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return Number(kb) * 1024;
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MiB`;

await main();
