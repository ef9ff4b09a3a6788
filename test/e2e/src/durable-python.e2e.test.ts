import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { loadConfig } from "@holdfast/config";
import { createLogger } from "@holdfast/log";
import { type RunningScheduler, startScheduler } from "@holdfast/scheduler";
import { agent, type HoldfastWorker, RunsApi, worker } from "@holdfast/sdk";
import { ensurePythonGrpc, type PythonGrpc, PythonUnavailableError, pythonEnv } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// A client in another language needs nothing but proto/: a Python script generates its
// modules with grpc_tools.protoc (Debian bookworm's python3-grpc-tools, unpacked by setup
// with python3-grpcio and python3-protobuf) and talks to the scheduler in this process,
// whose runs a worker in this process runs.

const execFileAsync = promisify(execFile);
const CLIENT = fileURLToPath(new URL("./durable_client.py", import.meta.url));
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const PROTO = join(ROOT, "proto");
// The standard health and reflection protos, as the packages the scheduler serves them with ship them.
const requireGrpc = createRequire(
  createRequire(createRequire(import.meta.url).resolve("@holdfast/scheduler")).resolve("@holdfast/grpc"),
);
const HEALTH_PROTO = join(
  dirname(requireGrpc.resolve("grpc-health-check/package.json")),
  "proto/health/v1/health.proto",
);
const REFLECTION_PROTO = join(
  dirname(requireGrpc.resolve("@grpc/reflection/package.json")),
  "build/proto/grpc/reflection/v1/reflection.proto",
);

let python: PythonGrpc | undefined;
try {
  python = await ensurePythonGrpc();
} catch (error) {
  if (!(error instanceof PythonUnavailableError)) throw error;
  console.warn(`durable-python: skipping the Python gRPC client: ${error.message}`);
}

const echo = agent<{ text: string }, { text: string }>(
  { name: "echo", version: "v1" },
  async (run, input) => ({
    text: await run.step("upper", () => input.text.toUpperCase()),
  }),
);

let stack: Stack;
let scheduler: RunningScheduler;
let api: RunsApi;
let serving: HoldfastWorker;

describe.skipIf(python === undefined)("a Python client generated from proto/", () => {
  beforeAll(async () => {
    stack = await startStack();
    const config = loadConfig({
      env: {},
      overrides: {
        ...stack.configFor("scheduler"),
        scheduler: { host: "127.0.0.1", grpc_port: 0, port: 0 },
      },
    });
    scheduler = await startScheduler(config, createLogger({ name: "scheduler", level: "warn" }));
    api = new RunsApi({ scheduler: scheduler.grpcAddress });
    await api.deploy(echo);
    serving = await worker({ agents: [echo], scheduler: scheduler.grpcAddress, name: "in-process" });
  });

  afterAll(async () => {
    await serving?.stop();
    api?.close();
    await scheduler?.close();
    await stack?.close();
  });

  it("checks health, lists the services by reflection, submits a run, watches it to its end and gets it", async () => {
    const tools = python!;
    const input = JSON.stringify({ text: "hello from python" });
    const args = [
      CLIENT,
      scheduler.grpcAddress,
      "echo",
      input,
      "--proto",
      PROTO,
      "--health-proto",
      HEALTH_PROTO,
      "--reflection-proto",
      REFLECTION_PROTO,
    ];
    const { stdout } = await execFileAsync(tools.python, args, {
      env: pythonEnv(tools),
      encoding: "utf8",
      timeout: 60_000,
    }).catch((error: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`${error.message}\nstdout:\n${error.stdout}\nstderr:\n${error.stderr}`);
    });
    // The session as a person would type it from the checkout (the README shows it).
    const shown = args.map((arg) =>
      arg === input ? `'${arg}'` : arg.startsWith(ROOT) ? relative(ROOT, arg) : arg,
    );
    console.log(`$ python3 ${shown.join(" ")}\n${stdout}`);
    const lines = stdout.trim().split("\n");

    expect(lines).toContain("health (server): SERVING");
    expect(lines).toContain("health holdfast.v1.Runs: SERVING");
    const services = lines.find((line) => line.startsWith("services: "))?.slice("services: ".length);
    expect(services?.split(", ")).toEqual(
      expect.arrayContaining(["grpc.health.v1.Health", "holdfast.v1.Runs"]),
    );
    const runId = lines.find((line) => line.startsWith("submitted: "))?.slice("submitted: ".length);
    expect(runId).toMatch(/^echo-/);
    expect(
      lines.filter((line) => line.startsWith("event ")).map((line) => line.replace(/^event \d+: /, "")),
    ).toEqual(["RunSubmitted", "RunLeased", "StepRecorded", "RunFinished"]);
    expect(lines).toContain("status: DURABLE_STATUS_FINISHED");
    const output = lines.find((line) => line.startsWith("output: "))?.slice("output: ".length);
    expect(JSON.parse(output ?? "null")).toEqual({ text: "HELLO FROM PYTHON" });
    // What the Python client saw is what the Node one sees.
    const run = await api.get(runId!);
    expect(JSON.parse(run.outputJson)).toEqual({ text: "HELLO FROM PYTHON" });
  });
});
