import { type ChildProcess, execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { supportsParentDeathSignal } from "@holdfast/natsd";
import { makeTempDir, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// `kill -9` of `holdfast up`: nothing it started may outlive it, and the next `up` on the
// same data dir must come up as the only nats-server on the store, with every run kept.
const BIN = fileURLToPath(new URL("../../../libs/cli/dist/bin.js", import.meta.url));
const run = promisify(execFile);

let dir: Awaited<ReturnType<typeof makeTempDir>>;
const ups: ChildProcess[] = [];
const started: number[] = [];

function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const key of Object.keys(env))
    if (key.startsWith("HOLDFAST_") && key !== "HOLDFAST_NATS_SERVER") delete env[key];
  return env;
}

async function startUp(...args: string[]): Promise<{ up: ChildProcess; output: () => string }> {
  let output = "";
  const up = spawn(process.execPath, [BIN, "up", "--data-dir", dir.path, "--port", "0", ...args], {
    env: cleanEnv(),
  });
  ups.push(up);
  up.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  up.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  await waitFor(
    () => up.exitCode === null && output.includes(args.includes("--demo") ? "Demo:" : "Ctrl-C stops"),
    {
      timeoutMs: 90_000,
      message: `holdfast up to come up (output so far: ${output})`,
    },
  );
  return { up, output: () => output };
}

async function holdfast(...args: string[]): Promise<string> {
  const { stdout } = await run(process.execPath, [BIN, ...args, "--data-dir", dir.path], {
    env: cleanEnv(),
    timeout: 60_000,
  });
  return stdout;
}

async function pgrep(...args: string[]): Promise<number[]> {
  try {
    const { stdout } = await run("pgrep", args);
    return stdout.split("\n").filter(Boolean).map(Number).filter(running);
  } catch (error) {
    if ((error as { code?: number }).code === 1) return [];
    throw error;
  }
}

/** A zombie has exited too: only its parent (init, once `up` is gone) has yet to reap it. */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !["Z", "X"].includes(stat.charAt(stat.lastIndexOf(")") + 2));
  } catch {
    return false;
  }
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
  } catch {
    return "";
  }
}

const natsOnStore = () => pgrep("-f", "--", `nats-server .*-sd ${join(dir.path, "nats")}( |$)`);

beforeAll(async () => {
  dir = await makeTempDir("up-orphans");
});
afterAll(async () => {
  for (const up of ups) {
    if (up.exitCode !== null || up.signalCode !== null) continue;
    const exited = once(up, "exit");
    up.kill("SIGINT");
    await exited;
  }
  // Whatever a failed assertion left running must not outlive the test run.
  for (const pid of started) if (running(pid)) process.kill(pid, "SIGKILL");
  await dir[Symbol.asyncDispose]();
});

describe("kill -9 of holdfast up", () => {
  it("takes everything it started down with it, and the next up is the only server on the store", async () => {
    const first = await startUp("--demo");
    const before = await waitFor(
      async () => {
        const runs = JSON.parse(await holdfast("ls", "--json")) as { run_id: string; steps: number }[];
        return runs.find((r) => r.run_id === "demo-agent" && r.steps === 3);
      },
      { timeoutMs: 30_000, message: "the demo run to be listed" },
    );

    const children = Object.fromEntries(
      (await pgrep("-P", String(first.up.pid))).map((pid) => {
        const command = commandOf(pid);
        const name = [
          "nats-server",
          "projector",
          "gateway",
          "budget",
          "control",
          "scheduler",
          "fake-provider",
        ].find((n) => command.includes(n));
        return [name ?? command, pid];
      }),
    );
    expect(Object.keys(children).sort()).toEqual([
      "budget",
      "control",
      "fake-provider",
      "gateway",
      "nats-server",
      "projector",
      "scheduler",
    ]);
    started.push(...Object.values(children));
    expect(await natsOnStore()).toEqual([children["nats-server"]]);

    const killed = once(first.up, "exit");
    first.up.kill("SIGKILL");
    await killed;

    const pdeathsig = await supportsParentDeathSignal();
    // Without setpriv nothing can make nats-server notice; the next `up` takes it over instead.
    const mustExit = Object.entries(children).filter(([name]) => pdeathsig || name !== "nats-server");
    const survivors = () => mustExit.filter(([, pid]) => running(pid)).map(([name]) => name);
    await waitFor(() => survivors().length === 0, { timeoutMs: 30_000 }).catch(() => undefined);
    expect(survivors()).toEqual([]);
    if (pdeathsig) expect(await pgrep("-f", dir.path)).toEqual([]);

    const second = await startUp();
    if (!pdeathsig) expect(second.output()).toContain("outlived the process that started it");
    const servers = await natsOnStore();
    started.push(...servers);
    expect(servers).toHaveLength(1);
    expect(servers[0]).not.toBe(children["nats-server"]);

    const runs = JSON.parse(await holdfast("ls", "--json")) as { run_id: string; steps: number }[];
    expect(runs.find((r) => r.run_id === "demo-agent")).toMatchObject({ steps: before.steps });
  });
});
