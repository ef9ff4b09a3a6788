import { type ChildProcess, execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { makeTempDir, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// The CLI as a user runs it: the built binary, its own nats-server, embedded ClickHouse,
// the demo provider, every service a separate process.
const BIN = fileURLToPath(new URL("../../../libs/cli/dist/bin.js", import.meta.url));
const EXAMPLE = fileURLToPath(new URL("../../../libs/sdk/examples/research.mjs", import.meta.url));
// Model calls made before the load tests: the demo's 9, and the durable run's 2.
const CALLS_BEFORE_LOAD = 11;
const run = promisify(execFile);

let dir: Awaited<ReturnType<typeof makeTempDir>>;
let up: ChildProcess | undefined;
let upOutput = "";

async function holdfast(...args: string[]): Promise<{ stdout: string; stderr: string; code: number }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [BIN, ...args, "--data-dir", dir.path], {
      env: cleanEnv(),
      timeout: 60_000,
    });
    return { stdout, stderr, code: 0 };
  } catch (error) {
    const e = error as { stdout: string; stderr: string; code: number };
    return { stdout: e.stdout, stderr: e.stderr, code: e.code };
  }
}

function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const key of Object.keys(env))
    if (key.startsWith("HOLDFAST_") && key !== "HOLDFAST_NATS_SERVER") delete env[key];
  return env;
}

async function startUp(...args: string[]): Promise<void> {
  upOutput = "";
  // Short heartbeats, so the calls a killed gateway leaves in flight are reaped quickly.
  up = spawn(process.execPath, [BIN, "up", "--data-dir", dir.path, "--port", "0", ...args], {
    env: { ...cleanEnv(), HOLDFAST_GATEWAY__HEARTBEAT_MS: "300" },
    // A process group of its own, as a shell gives a command it runs: Ctrl-C goes to the group.
    detached: true,
  });
  up.stdout?.on("data", (chunk: Buffer) => {
    upOutput += chunk.toString();
  });
  up.stderr?.on("data", (chunk: Buffer) => {
    upOutput += chunk.toString();
  });
  await waitFor(() => upOutput.includes(args.includes("--demo") ? "Demo:" : "Ctrl-C stops everything"), {
    timeoutMs: 90_000,
    message: "holdfast up did not come up",
  });
}

async function stopUp(): Promise<number | null> {
  if (!up || up.exitCode !== null) return up?.exitCode ?? null;
  const exited = once(up, "exit");
  // Ctrl-C in a terminal signals the whole foreground process group, not only `up`.
  process.kill(-up.pid!, "SIGINT");
  const [code] = (await exited) as [number | null];
  return code;
}

function stack(): { gatewayUrl: string; analyticsUrl: string; natsUrl: string; controlUrl: string } {
  return JSON.parse(readFileSync(join(dir.path, "holdfast.json"), "utf8"));
}

/** A token `holdfast up` made for this stack (credentials/control.token, read.token, …). */
function token(name: "control" | "read"): string {
  return readFileSync(join(dir.path, "credentials", `${name}.token`), "utf8").trim();
}

/** A service's health with its details (pid, lag), as the read token sees it. */
async function health(url: string): Promise<{ pid: number; lag_events?: number } | undefined> {
  try {
    const response = await fetch(url, {
      headers: { authorization: `Bearer ${token("read")}` },
      signal: AbortSignal.timeout(2_000),
    });
    return response.ok ? ((await response.json()) as { pid: number; lag_events?: number }) : undefined;
  } catch {
    return undefined;
  }
}

function rssBytes(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return Number(kb) * 1024;
}

async function json<T>(...args: string[]): Promise<T> {
  const result = await holdfast(...args, "--json");
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout) as T;
}

async function stepCount(): Promise<number> {
  const [row] = await json<{ n: number }[]>(
    "query",
    "SELECT count() AS n, uniqExact(step_id) AS u FROM steps",
  );
  return row!.n;
}

beforeAll(async () => {
  dir = await makeTempDir("cli");
});
afterAll(async () => {
  await stopUp();
  await dir[Symbol.asyncDispose]();
});

describe("holdfast CLI", () => {
  it("says clearly when nothing is running", async () => {
    const result = await holdfast("ls");
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/not running on data dir/);
  });

  it("names the key of a bad config value and exits 2", async () => {
    const file = join(dir.path, "bad.yaml");
    writeFileSync(file, "gateway:\n  port: lots\n");
    const result = await holdfast("up", "--config", file);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("gateway.port");
    expect(result.stderr).toContain("bad.yaml");
  });

  it("brings the stack up with the demo provider and shows the demo's runs", async () => {
    await startUp("--demo");
    expect(upOutput).toContain(stack().gatewayUrl);
    expect(upOutput).toMatch(/base_url="http:\/\/127\.0\.0\.1:\d+\/v1"/);

    const runs = await json<{ run_id: string; steps: number; tag: string; status: string }[]>("ls");
    expect(runs.find((r) => r.run_id === "demo-agent")).toMatchObject({
      steps: 3,
      tag: "demo",
      status: "idle",
    });
    expect(runs.some((r) => /^fp-[0-9a-f]{16}-1$/.test(r.run_id))).toBe(true);
    // One agent per API shape: Responses joined by previous_response_id, Messages by metadata.user_id.
    expect(runs.find((r) => r.run_id === "demo-researcher")).toMatchObject({ steps: 2, status: "idle" });
    expect(runs.find((r) => r.run_id === "demo-claude")).toMatchObject({ steps: 2, status: "idle" });
    const apis = await json<{ api: string; n: string }[]>(
      "query",
      "SELECT api, count() AS n FROM steps GROUP BY api ORDER BY api",
    );
    expect(apis.map((r) => [r.api, Number(r.n)])).toEqual([
      ["anthropic_messages", 2],
      ["openai_chat_completions", 5],
      ["openai_responses", 2],
    ]);

    const shown = await json<{ completed: number; steps: { tool_calls: string[]; stream: boolean }[] }>(
      "show",
      "demo-agent",
    );
    expect(shown.completed).toBe(3);
    expect(shown.steps[0]?.tool_calls).toEqual(["get_weather"]);
    expect(shown.steps[2]?.stream).toBe(true);
    // `show --json` is the control API's answer for the run, key for key.
    const answer = await fetch(`${stack().controlUrl}/holdfast/v1/runs/demo-agent`, {
      headers: { authorization: `Bearer ${token("read")}` },
    });
    expect(((await answer.json()) as { run: unknown }).run).toEqual(shown);

    const table = await holdfast("ls");
    expect(table.stdout).toMatch(/demo-agent\s+demo\s+-\s+gpt-4o-mini\s+idle\s+3/);
    expect(await stepCount()).toBe(9);
  });

  it("deploys an agent, serves it with `holdfast worker`, and runs it: durable runs in ls and show", async () => {
    const deployed = await holdfast("deploy", EXAMPLE);
    expect(deployed.code).toBe(0);
    expect(deployed.stdout).toMatch(/research: deployed version \S+\n\s+new agent/);
    expect(deployed.stdout).toContain("concurrency_per_key: 2");
    expect(deployed.stdout).toContain("rate_limit: 30/min");
    expect((await holdfast("deploy", EXAMPLE)).stdout).toMatch(/research: unchanged/);
    const worker = spawn(process.execPath, [BIN, "worker", EXAMPLE, "--data-dir", dir.path], {
      env: cleanEnv(),
    });
    let workerOutput = "";
    worker.stdout?.on("data", (chunk: Buffer) => {
      workerOutput += chunk.toString();
    });
    try {
      await waitFor(() => workerOutput.includes("serves research@"), {
        timeoutMs: 30_000,
        message: "no worker",
      });
      const submitted = await holdfast(
        "runs",
        "submit",
        "research",
        "--input",
        '{"question":"Why do lighthouses flash?"}',
        "--wait",
        "--json",
      );
      expect(submitted.code).toBe(0);
      const run = JSON.parse(submitted.stdout) as {
        run_id: string;
        status: string;
        steps: { label: string }[];
      };
      expect(run.status, `${submitted.stdout}\n${workerOutput}`).toBe("finished");
      expect(run.steps.map((s) => s.label)).toEqual(["model", "tool:search", "tool:encyclopedia", "model"]);
      expect(workerOutput).toMatch(new RegExp(`finished ${run.run_id}: 4 steps run, 0 reused`));
      const shown = await holdfast("show", run.run_id);
      expect(shown.stdout).toContain("Durable run");
      expect(shown.stdout).toMatch(/tool:encyclopedia#1\s+1\s+yes/);
      await waitFor(
        async () => {
          const rows =
            await json<{ run_id: string; agent: string; status: string; durable_steps: number }[]>("ls");
          return rows.find((r) => r.run_id === run.run_id && r.status === "finished");
        },
        { timeoutMs: 10_000, message: "the durable run did not reach ls" },
      ).then((row) => expect(row).toMatchObject({ agent: "research", durable_steps: 4 }));
      const listed = await holdfast("runs", "ls", "--agent", "research");
      expect(listed.stdout).toMatch(new RegExp(`${run.run_id}\\s+research\\s+\\S+\\s+finished\\s+4\\s+2`));
      const redrive = await holdfast("runs", "redrive", run.run_id);
      expect(redrive.code).toBe(1);
      expect(redrive.stderr).toMatch(/finished: a re-drive would reuse every step/);
    } finally {
      worker.kill("SIGINT");
      await once(worker, "exit");
    }
  });

  it("refuses a second `up` on the same data dir while one runs", async () => {
    const result = await holdfast("up");
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/already running/);
  });

  it("refuses to rotate the credentials of the stack that runs on them, and keeps every one", async () => {
    const before = token("control");
    const result = await holdfast("credentials", "--rotate");
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /Holdfast is running on .* stop it \(Ctrl-C\), rotate, then start it again/,
    );
    expect(token("control")).toBe(before);
    expect((await holdfast("ls")).code).toBe(0);
  });

  it("answers an endless query with the rows asked for, the projector's memory bounded", async () => {
    const projector = await health(`${stack().analyticsUrl}/health`);
    const rssBefore = rssBytes(projector!.pid);
    const rows = await json<{ number: number }[]>(
      "query",
      "SELECT number FROM system.numbers",
      "--max-rows",
      "3",
    );
    expect(rows).toEqual([{ number: 0 }, { number: 1 }, { number: 2 }]);
    // Same process, not a restarted one, and it grew by less than one query's memory limit.
    expect((await health(`${stack().analyticsUrl}/health`))?.pid).toBe(projector!.pid);
    expect(rssBytes(projector!.pid) - rssBefore).toBeLessThan(256 * 1024 * 1024);
  });

  it("refuses writes hidden in operator SQL, and nothing changes", async () => {
    const tables = async () =>
      (await json<{ name: string }[]>("query", "SHOW TABLES")).map((t) => t.name).sort();
    const before = await tables();
    const attack = await holdfast(
      "query",
      "SELECT $$'$$; CREATE TABLE pwned (x UInt8) ENGINE = MergeTree ORDER BY x; SELECT '1'",
    );
    expect(attack.code).toBe(1);
    expect(attack.stderr).toMatch(/Multi-statements are not allowed/);
    const read = await holdfast("query", "SELECT * FROM file('/etc/hostname', 'LineAsString')");
    expect(read.code).toBe(1);
    expect(read.stderr).toMatch(/The name file is not allowed/);
    const drop = await holdfast("query", "DROP TABLE steps_v1");
    expect(drop.code).toBe(1);
    expect(await tables()).toEqual(before);
    expect(await stepCount()).toBe(CALLS_BEFORE_LOAD);
  });

  it("counts every call exactly once when the projector is killed under load and comes back", async () => {
    const { gatewayUrl, analyticsUrl } = stack();
    const call = (i: number) =>
      fetch(`${gatewayUrl}/chat/completions`, {
        method: "POST",
        headers: {
          authorization: "Bearer sk-load",
          "content-type": "application/json",
          "X-Holdfast-Run": `load-${i % 8}`,
        },
        body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: `call ${i}` }] }),
      }).then((r) => r.text());
    const load = (async () => {
      for (let batch = 0; batch < 10; batch++)
        await Promise.all(Array.from({ length: 20 }, (_, i) => call(batch * 20 + i)));
    })();
    let kills = 0;
    for (let i = 0; i < 3; i++) {
      const victim = await waitFor(() => health(`${analyticsUrl}/health`), {
        timeoutMs: 30_000,
        message: "projector not up",
      });
      process.kill(victim.pid, "SIGKILL");
      kills += 1;
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    await load;
    expect(kills).toBe(3);
    // The supervisor restarted it, and it caught up with the log (its checkpoint reached
    // the stream's end: every call's outcome included).
    await waitFor(async () => (await stepCount()) >= CALLS_BEFORE_LOAD + 200, {
      timeoutMs: 60_000,
      message: "projector did not catch up after restarts",
    });
    const [totals] = await json<{ n: number; u: number; load: number }[]>(
      "query",
      "SELECT count() AS n, uniqExact(step_id) AS u, countIf(startsWith(run_id, 'load-')) AS load FROM steps",
    );
    expect(totals).toEqual({ n: CALLS_BEFORE_LOAD + 200, u: CALLS_BEFORE_LOAD + 200, load: 200 });
    expect(upOutput).toMatch(/projector exited .*restarting/);
  });

  it("shows a run from the log while the projector is stopped", async () => {
    const projector = await health(`${stack().analyticsUrl}/health`);
    process.kill(projector!.pid, "SIGSTOP");
    try {
      const shown = await json<{ steps: unknown[] }>("show", "load-3");
      expect(shown.steps).toHaveLength(25);
    } finally {
      process.kill(projector!.pid, "SIGCONT");
    }
  });

  it("restarts a nats-server that dies, and nothing recorded is lost", async () => {
    const { stdout } = await run("pgrep", ["-f", `nats-server.*${join(dir.path, "nats")}`]);
    const pid = Number(stdout.trim().split("\n")[0]);
    process.kill(pid, "SIGKILL");
    await waitFor(() => upOutput.includes("nats-server exited"), {
      timeoutMs: 10_000,
      message: "no restart notice",
    });
    const { gatewayUrl } = stack();
    await waitFor(
      async () =>
        (
          await fetch(`${gatewayUrl}/chat/completions`, {
            method: "POST",
            headers: {
              authorization: "Bearer sk-x",
              "content-type": "application/json",
              "X-Holdfast-Run": "after-nats",
            },
            body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "back?" }] }),
          })
        ).ok,
      { timeoutMs: 30_000, message: "gateway never recovered after nats-server restarted" },
    );
    expect((await json<{ steps: unknown[] }>("show", "load-3")).steps).toHaveLength(25);
    await waitFor(async () => (await stepCount()) === CALLS_BEFORE_LOAD + 201, {
      timeoutMs: 30_000,
      message: "call after restart not projected",
    });
  });

  it("loses nothing and counts nothing twice when the gateway is killed under load", async () => {
    const { gatewayUrl, analyticsUrl } = stack();
    const healthUrl = gatewayUrl.replace(/\/v1$/, "/holdfast/health");
    // An agent that retries until 100 of its calls have been answered.
    let ok = 0;
    let failed = 0;
    const load = (async () => {
      for (let i = 0; ok < 100; i++) {
        const response = await fetch(`${gatewayUrl}/chat/completions`, {
          method: "POST",
          headers: {
            authorization: "Bearer sk-x",
            "content-type": "application/json",
            "X-Holdfast-Run": `gw-kill-${i % 5}`,
          },
          body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: `call ${i}` }] }),
        }).catch(() => undefined);
        if (response?.ok) ok += 1;
        else {
          failed += 1;
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
        await response?.text();
      }
    })();
    const victim = await waitFor(() => health(healthUrl), { timeoutMs: 10_000, message: "gateway not up" });
    await new Promise((resolve) => setTimeout(resolve, 200));
    process.kill(victim.pid, "SIGKILL");
    await load;
    await waitFor(async () => (await health(healthUrl))?.pid !== undefined, {
      timeoutMs: 30_000,
      message: "gateway not restarted",
    });
    await waitFor(async () => (await health(`${analyticsUrl}/health`))?.lag_events === 0, {
      timeoutMs: 30_000,
      message: "projector did not catch up",
    });
    // The calls the dead gateway had in flight are marked failed by the restarted one.
    await waitFor(
      async () => {
        const [open] = await json<{ n: number }[]>(
          "query",
          "SELECT countIf(type = 'StepStarted') - countIf(type IN ('StepCompleted', 'StepFailed')) AS n FROM events WHERE startsWith(run_id, 'gw-kill-')",
        );
        return open!.n === 0;
      },
      { timeoutMs: 30_000, message: "calls left in flight by the killed gateway were never reaped" },
    );
    // Every outcome in the log is exactly one row; calls answered OK are all there.
    // A call answered just before the kill whose outcome had not reached the log yet is
    // charged by the reaper from its estimate: answered calls are completed or estimated.
    const [totals] = await json<{ outcomes: number; rows: number; distinct: number; charged: number }[]>(
      "query",
      `SELECT
         (SELECT count() FROM events WHERE type IN ('StepCompleted', 'StepFailed') AND startsWith(run_id, 'gw-kill-')) AS outcomes,
         count() AS rows, uniqExact(step_id) AS distinct, countIf(status = 'completed' OR estimated) AS charged
       FROM steps WHERE startsWith(run_id, 'gw-kill-')`,
    );
    expect(totals!.rows).toBe(totals!.outcomes);
    expect(totals!.distinct).toBe(totals!.rows);
    expect(totals!.charged).toBeGreaterThanOrEqual(ok);
    expect(failed).toBeGreaterThan(0);
    expect(upOutput).toMatch(/gateway exited .*restarting/);
  });

  it("stops everything on Ctrl-C, and a second `up` finds every earlier run", async () => {
    const { gatewayUrl, analyticsUrl } = stack();
    const before = upOutput.length;
    expect(await stopUp()).toBe(0);
    // Every service stopped in order, by `up`: none taken for one that died and restarted.
    expect(upOutput.slice(before)).not.toMatch(/restarting/);
    expect(upOutput.slice(before)).toContain("Stopped. Everything recorded is kept in the data dir.");
    expect(await health(`${analyticsUrl}/health`)).toBeUndefined();
    expect(await health(gatewayUrl.replace(/\/v1$/, "/holdfast/health"))).toBeUndefined();

    await startUp();
    const runs = await json<{ run_id: string }[]>("ls");
    expect(runs.map((r) => r.run_id)).toEqual(expect.arrayContaining(["demo-agent", "load-0", "load-7"]));
    const [{ n }] = (await json<{ n: number }[]>(
      "query",
      "SELECT count() AS n FROM steps WHERE NOT startsWith(run_id, 'gw-kill-')",
    )) as [{ n: number }];
    expect(n).toBe(CALLS_BEFORE_LOAD + 201);
    expect((await json<{ completed: number }>("show", "demo-agent")).completed).toBe(3);
  });
});
