import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort, makeTempDir, waitFor } from "@holdfast/test-harness";
import { afterAll, describe, expect, it } from "vitest";

// Two stacks started at the same moment on one machine, each wanting the same ports (as
// two `holdfast up` with the defaults would): both come up, the second on free ports it
// names, instead of one of them dying with EADDRINUSE between a check and a bind.
const BIN = fileURLToPath(new URL("../../../libs/cli/dist/bin.js", import.meta.url));

interface Up {
  child: ChildProcess;
  dir: string;
  output: () => string;
}

const ups: Up[] = [];
const dirs: Awaited<ReturnType<typeof makeTempDir>>[] = [];

afterAll(async () => {
  for (const { child } of ups) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    const exited = once(child, "exit");
    process.kill(-child.pid!, "SIGINT");
    await exited;
  }
  for (const dir of dirs) await dir[Symbol.asyncDispose]();
});

async function startUp(ports: Record<string, number>): Promise<Up> {
  const dir = await makeTempDir("up-ports");
  dirs.push(dir);
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of Object.keys(env))
    if (key.startsWith("HOLDFAST_") && key !== "HOLDFAST_NATS_SERVER") delete env[key];
  for (const [key, port] of Object.entries(ports)) env[key] = String(port);
  const child = spawn(process.execPath, [BIN, "up", "--data-dir", dir.path], { env, detached: true });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  const up = { child, dir: dir.path, output: () => output };
  ups.push(up);
  return up;
}

describe("two `holdfast up` started at once, wanting the same ports", () => {
  it("both come up, the one that found a port taken on a free one it names, and each serves", async () => {
    const ports = {
      HOLDFAST_GATEWAY__PORT: await freePort(),
      HOLDFAST_CONTROL__PORT: await freePort(),
      HOLDFAST_CONTROL__GRPC_PORT: await freePort(),
      HOLDFAST_SCHEDULER__GRPC_PORT: await freePort(),
      HOLDFAST_SCHEDULER__PORT: await freePort(),
    };
    const [a, b] = await Promise.all([startUp(ports), startUp(ports)]);
    for (const up of [a!, b!]) {
      await waitFor(() => up.output().includes("Ctrl-C stops everything") || up.child.exitCode !== null, {
        timeoutMs: 90_000,
        message: "holdfast up did not come up",
      });
      expect(up.child.exitCode, up.output()).toBeNull();
    }
    const notes = [a!, b!].map(
      (up) => up.output().match(/note: \S+ \d+ is in use; \S+ took \d+ instead\./g) ?? [],
    );
    // Every port was wanted by both: each went to one stack, the other took a free one.
    expect(notes[0]!.length + notes[1]!.length).toBeGreaterThanOrEqual(Object.keys(ports).length);
    const files = [a!, b!].map(
      (up) =>
        JSON.parse(readFileSync(join(up.dir, "holdfast.json"), "utf8")) as {
          gatewayUrl: string;
          controlUrl: string;
        },
    );
    expect(new Set(files.map((f) => f.gatewayUrl)).size).toBe(2);
    expect(new Set(files.map((f) => f.controlUrl)).size).toBe(2);
    for (const file of files) {
      const health = await fetch(file.gatewayUrl.replace(/\/v1$/, "/holdfast/health"));
      expect(health.status).toBe(200);
      expect((await fetch(`${file.controlUrl}/holdfast/v1/health`)).status).toBe(200);
    }
  }, 120_000);
});
