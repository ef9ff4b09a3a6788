import { type ChildProcess, execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { makeTempDir, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// The README's durable flow on a stack with tokens, as a new user runs it: `holdfast up
// --config FILE` (the file `holdfast init` writes has control.token), then deploy, submit
// and a worker, each a separate CLI process given no --config: each finds the running
// stack's file (recorded in <data_dir>/holdfast.json) and its token there.
const BIN = fileURLToPath(new URL("../../../libs/cli/dist/bin.js", import.meta.url));
const EXAMPLE = fileURLToPath(new URL("../../../libs/sdk/examples/research.mjs", import.meta.url));
const CONTROL = "control-token-for-the-cli-tests-0123456789";
const READ = "read-token-for-the-cli-tests-0123456789";
const run = promisify(execFile);

let dir: Awaited<ReturnType<typeof makeTempDir>>;
let up: ChildProcess | undefined;
const children: ChildProcess[] = [];

function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const key of Object.keys(env))
    if (key.startsWith("HOLDFAST_") && key !== "HOLDFAST_NATS_SERVER") delete env[key];
  return env;
}

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

/** A CLI process left running, its output gathered as it comes. */
function started(...args: string[]): { child: ChildProcess; stdout: () => string; stderr: () => string } {
  const child = spawn(process.execPath, [BIN, ...args, "--data-dir", dir.path], { env: cleanEnv() });
  children.push(child);
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return { child, stdout: () => stdout, stderr: () => stderr };
}

function configFile(
  name: string,
  control: Record<string, string | number>,
  scheduler: Record<string, string | number> = {},
): string {
  const file = join(dir.path, name);
  const lines = (section: Record<string, string | number>) =>
    Object.entries(section).map(([key, value]) => `  ${key}: ${value}\n`);
  // Free ports throughout: other stacks may run on this machine.
  writeFileSync(
    file,
    `control:\n${lines(control).join("")}  port: 0\n  grpc_port: 0\nscheduler:\n${lines(scheduler).join("")}  port: 0\n  grpc_port: 0\n`,
    { mode: 0o600 },
  );
  return file;
}

beforeAll(async () => {
  dir = await makeTempDir("cli-tokens");
  const file = configFile("holdfast.yaml", { token: CONTROL, read_token: READ });
  const stack = started("up", "--config", file, "--port", "0", "--demo");
  up = stack.child;
  await waitFor(() => (stack.stdout() + stack.stderr()).includes("Demo:"), {
    timeoutMs: 90_000,
    message: "holdfast up did not come up",
  });
});

afterAll(async () => {
  for (const child of children.filter((c) => c !== up && c.exitCode === null)) child.kill("SIGKILL");
  if (up !== undefined && up.exitCode === null) {
    const exited = once(up, "exit");
    up.kill("SIGINT");
    await exited;
  }
  await dir?.[Symbol.asyncDispose]();
});

describe("the durable flow on a stack with tokens", () => {
  it("deploys, submits with --wait (saying what the run waits for), and `holdfast worker` serves it, none given --config", async () => {
    const deployed = await holdfast("deploy", EXAMPLE);
    expect(deployed.stderr).toBe("");
    expect(deployed.code).toBe(0);

    const submit = started(
      "runs",
      "submit",
      "research",
      "--input",
      '{"question":"Why do lighthouses flash?"}',
      "--wait",
    );
    // Nothing serves the agent yet: the command says so, and waits.
    await waitFor(() => /no worker serves research/.test(submit.stderr()), {
      timeoutMs: 30_000,
      message: "runs submit --wait did not say that no worker serves the agent",
    });
    expect(submit.stderr()).toMatch(/queued: research \(version \S+\)/);

    const worker = started("worker", EXAMPLE);
    await waitFor(() => worker.stdout().includes("serves research@"), {
      timeoutMs: 30_000,
      message: `the worker did not start serving: ${worker.stderr()}`,
    });
    const [code] = (await once(submit.child, "exit")) as [number | null];
    expect(code, submit.stderr()).toBe(0);
    const progress = submit.stderr();
    // Each stage as it happened, in order.
    const stages = [
      /queued: research/,
      /no worker serves research/,
      /leased by worker \S+ \(lease 1\)/,
      /model call 1 \(gpt-4o-mini\) through the gateway/,
      /step model#1 recorded/,
      /step tool:encyclopedia#1 recorded/,
      /step model#2 recorded/,
      /finished/,
    ].map((stage) => progress.search(stage));
    expect(
      stages.every((at) => at >= 0),
      progress,
    ).toBe(true);
    expect(stages).toEqual([...stages].sort((a, b) => a - b));
    const runId = /submitted: (\S+)/.exec(submit.stdout())?.[1];
    expect(submit.stdout()).toMatch(/status\s+finished/);
    expect(worker.stdout()).toMatch(new RegExp(`finished ${runId}: 4 steps run, 0 reused`));

    // `runs show --json` is the runs REST API's answer for the run, key for key.
    const shown = await holdfast("runs", "show", runId!, "--json");
    expect(shown.code, shown.stderr).toBe(0);
    const { schedulerUrl } = JSON.parse(readFileSync(join(dir.path, "holdfast.json"), "utf8")) as {
      schedulerUrl: string;
    };
    const answer = await fetch(`${schedulerUrl}/v1/runs/${runId}`, {
      headers: { authorization: `Bearer ${READ}` },
    });
    expect(answer.status).toBe(200);
    expect(JSON.parse(shown.stdout)).toEqual(((await answer.json()) as { run: unknown }).run);
    expect(JSON.parse(shown.stdout)).toMatchObject({ run_id: runId, status: "finished", steps_recorded: 4 });
    worker.child.kill("SIGINT");
    await once(worker.child, "exit");
  });

  it("a worker whose token the stack refuses says so and exits non-zero", async () => {
    const wrong = await holdfast(
      "worker",
      EXAMPLE,
      "--config",
      configFile("wrong.yaml", {}, { worker_token: "not-the-token" }),
    );
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/refused this worker: the bearer token is not one the runs API knows/);
    expect(wrong.stderr).toMatch(/scheduler\.worker_token/);

    // The operator's token may not serve runs: what a worker runs is an agent's code, and
    // it must not hold a credential that could resume the run it is serving.
    const operator = await holdfast(
      "worker",
      EXAMPLE,
      "--config",
      configFile("operator.yaml", {}, { worker_token: CONTROL }),
    );
    expect(operator.code).toBe(1);
    expect(operator.stderr).toMatch(/refused this worker: an operator's token may not serve runs/);
  });
});
