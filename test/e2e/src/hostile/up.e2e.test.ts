import { type ChildProcess, execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { BusConfigurationError, BusRejectedError, connectBus, newNatsCredential } from "@holdfast/bus";
import { createIdGenerator, makeEnvelope } from "@holdfast/events";
import { connect, GrpcStatus, type ServiceError } from "@holdfast/grpc";
import { BudgetClient, ControlClient, RunsClient } from "@holdfast/proto";
import { makeTempDir, publishRaw, waitFor } from "@holdfast/test-harness";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect as natsConnect, nkeyAuthenticator } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rawExchange } from "./wire.js";

// The attack run, against a real `holdfast up --demo` on this machine, as an agent with a
// shell on the same host would try it: no credential of its own, or a stolen one of a
// service, poisoned bytes, an upstream that lies, a client that never finishes. After each,
// the stack goes on (a later call is metered and projected), and at the end `up` restarts
// on the same data dir and finds everything.
const BIN = fileURLToPath(new URL("../../../../libs/cli/dist/bin.js", import.meta.url));
const run = promisify(execFile);

let dir: Awaited<ReturnType<typeof makeTempDir>>;
let up: ChildProcess | undefined;
let output = "";

interface StackFile {
  gatewayUrl: string;
  natsUrl: string;
  analyticsUrl: string;
  controlUrl: string;
  controlGrpc: string;
  budgetUrl: string;
  schedulerGrpc: string;
  schedulerUrl: string;
}
const stack = (): StackFile => JSON.parse(readFileSync(join(dir.path, "holdfast.json"), "utf8")) as StackFile;
const secret = (name: string) => join(dir.path, "credentials", name);

function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const key of Object.keys(env))
    if (key.startsWith("HOLDFAST_") && key !== "HOLDFAST_NATS_SERVER") delete env[key];
  return env;
}

async function startUp(): Promise<void> {
  output = "";
  up = spawn(process.execPath, [BIN, "up", "--demo", "--data-dir", dir.path, "--port", "0"], {
    env: {
      ...cleanEnv(),
      HOLDFAST_CONTROL__PORT: "0",
      HOLDFAST_CONTROL__GRPC_PORT: "0",
      HOLDFAST_SCHEDULER__PORT: "0",
      HOLDFAST_SCHEDULER__GRPC_PORT: "0",
      // A slow client is cut off after a second of silence in its headers.
      HOLDFAST_HTTP__HEADER_TIMEOUT_MS: "1000",
      // With budgets, the budget service folds the month's steps at start: a poisoned event
      // or an absurd usage once made it throw there, and `up` exited.
      HOLDFAST_BUDGETS: '{"*": {"monthly_usd": 1000}}',
    },
    detached: true,
  });
  up.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  up.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  await waitFor(() => output.includes("Demo:") || up?.exitCode !== null, {
    timeoutMs: 90_000,
    message: "holdfast up did not come up",
  });
  expect(up.exitCode, output).toBeNull();
}

async function stopUp(): Promise<number | null> {
  if (up === undefined || up.exitCode !== null) return up?.exitCode ?? null;
  const exited = once(up, "exit");
  process.kill(-up.pid!, "SIGINT");
  const [code] = (await exited) as [number | null];
  return code;
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

/** A model call through the gateway, as an agent makes it; resolves with the HTTP status. */
async function call(runId: string, headers: Record<string, string> = {}): Promise<number> {
  const response = await fetch(`${stack().gatewayUrl}/chat/completions`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      authorization: "Bearer sk-hostile-0123456789abcdef",
      "x-holdfast-run": runId,
      ...headers,
    },
    body: JSON.stringify({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: `hello from ${runId}` }],
    }),
  });
  await response.arrayBuffer();
  return response.status;
}

/** The stack goes on: a fresh call is answered, metered in the log and projected into ClickHouse. */
async function goesOn(runId: string): Promise<void> {
  expect(await call(runId)).toBe(200);
  await waitFor(
    async () => {
      const shown = await holdfast("show", runId, "--json");
      return shown.code === 0 && (JSON.parse(shown.stdout) as { completed: number }).completed === 1
        ? true
        : undefined;
    },
    { timeoutMs: 20_000, message: `${runId} was not metered` },
  );
  await waitFor(
    async () => {
      const rows = await holdfast(
        "query",
        `SELECT count() AS n FROM steps WHERE run_id = '${runId}'`,
        "--json",
      );
      return rows.code === 0 && (JSON.parse(rows.stdout) as { n: number }[])[0]?.n === 1 ? true : undefined;
    },
    { timeoutMs: 20_000, message: `${runId} was not projected` },
  );
}

beforeAll(async () => {
  dir = await makeTempDir("hostile-up");
  await startUp();
}, 120_000);

afterAll(async () => {
  await stopUp();
  await dir?.[Symbol.asyncDispose]();
});

describe("holdfast up, against a hostile process on the same host", () => {
  it("admits no NATS client without one of its credentials, whatever it presents", async () => {
    await expect(
      connectBus({ servers: stack().natsUrl, prefix: "hf", name: "intruder" }),
    ).rejects.toBeInstanceOf(BusConfigurationError);
    const stranger = newNatsCredential();
    await expect(
      natsConnect({
        servers: stack().natsUrl,
        authenticator: nkeyAuthenticator(new TextEncoder().encode(stranger.seed)),
        maxReconnectAttempts: 0,
      }),
    ).rejects.toThrow(/authorization/i);
    await goesOn("after-intruder");
  });

  it("lets no service's credential do another's job: a stolen gateway credential cannot resume a run, nor any delete the log", async () => {
    const newId = createIdGenerator();
    const as = (principal: string) =>
      connectBus({
        servers: stack().natsUrl,
        prefix: "hf",
        name: `stolen ${principal}`,
        credentials: secret(`nats-${principal}.nk`),
        principal: principal as "gateway",
        appendTimeoutMs: 2_000,
      });
    const resume = makeEnvelope({
      id: newId(),
      runId: "demo-agent",
      sequence: 99,
      timestampMs: Date.now(),
      tag: "",
      payload: {
        $case: "runResumed",
        value: {
          actor: { kind: 1, name: "control token" },
          reason: "",
          selector: undefined,
          limits: undefined,
          overrides: false,
          checkpoint: false,
          compact: 0,
        },
      },
    });
    for (const principal of ["gateway", "budget", "projector", "scheduler", "reader"]) {
      const bus = await as(principal);
      try {
        await expect(bus.append(resume, 0), principal).rejects.toBeInstanceOf(BusRejectedError);
      } finally {
        await bus.close();
      }
    }
    for (const principal of ["gateway", "budget", "projector", "control", "scheduler", "reader"]) {
      const seed = readFileSync(secret(`nats-${principal}.nk`), "utf8").trim();
      const nc = await natsConnect({
        servers: stack().natsUrl,
        authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)),
        inboxPrefix: `_INBOX_${principal}`,
      });
      try {
        const jsm = await jetstreamManager(nc, { timeout: 2_000 });
        await expect(jsm.streams.delete("HF_EVENTS"), principal).rejects.toThrow();
        await expect(jsm.streams.purge("HF_EVENTS"), principal).rejects.toThrow();
        await expect(jsm.streams.update("HF_EVENTS", { deny_delete: false }), principal).rejects.toThrow();
      } finally {
        await nc.close();
      }
    }
    await goesOn("after-stolen-credentials");
  });

  it("answers no unauthenticated call to any of its APIs", async () => {
    const { controlUrl, controlGrpc, analyticsUrl, budgetUrl, schedulerGrpc, schedulerUrl, gatewayUrl } =
      stack();
    // REST and HTTP.
    const hold = await fetch(`${controlUrl}/holdfast/v1/runs/demo-agent/hold`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(hold.status).toBe(401);
    expect(
      (await fetch(`${analyticsUrl}/v1/query`, { method: "POST", body: '{"sql":"SELECT 1"}' })).status,
    ).toBe(401);
    expect((await fetch(`${analyticsUrl}/v1/runs`)).status).toBe(401);
    expect((await fetch(`${analyticsUrl}/metrics`)).status).toBe(401);
    expect((await fetch(`${schedulerUrl}/v1/runs`)).status).toBe(401);
    const submitted = await fetch(`${schedulerUrl}/v1/agents/demo-agent/runs`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ input: {} }),
    });
    expect(submitted.status).toBe(401);
    expect(((await submitted.json()) as { error: { code: string } }).error.code).toBe("unauthenticated");
    const health = (await (await fetch(gatewayUrl.replace(/\/v1$/, "/holdfast/health"))).json()) as Record<
      string,
      unknown
    >;
    expect(health).toEqual({ status: "ok" });
    // gRPC: a unary call, and the streams, each refused at once.
    const budget = connect(BudgetClient, { address: budgetUrl, deadlineMs: 5_000 });
    const acquired = await new Promise<ServiceError | null>((resolve) =>
      budget.acquire(
        { key: "*", gateway: "intruder", wantNanoUsd: 10 ** 12, needNanoUsd: 10 ** 9, reportedNanoUsd: 0 },
        (error) => resolve(error),
      ),
    );
    expect(acquired?.code).toBe(GrpcStatus.UNAUTHENTICATED);
    budget.close();
    const runs = connect(RunsClient, { address: schedulerGrpc, deadlineMs: 5_000 });
    const session = runs.work({ deadline: Date.now() + 10_000 });
    const refused = await new Promise<ServiceError>((resolve) => session.on("error", resolve));
    expect(refused.code).toBe(GrpcStatus.UNAUTHENTICATED);
    const submit = await new Promise<ServiceError | null>((resolve) =>
      runs.submit(
        {
          agent: "demo-agent",
          inputJson: "{}",
          partitionKey: "",
          timeoutSeconds: 0,
          idempotencyKey: "",
          tenant: "",
          tag: "",
        },
        (error) => resolve(error),
      ),
    );
    expect(submit?.code).toBe(GrpcStatus.UNAUTHENTICATED);
    runs.close();
    const controlClient = connect(ControlClient, { address: controlGrpc, deadlineMs: 5_000 });
    const held = await new Promise<ServiceError | null>((resolve) =>
      controlClient.hold(
        { target: { target: { $case: "runId", value: "demo-agent" }, reason: "intruder" } },
        (error) => resolve(error),
      ),
    );
    expect(held?.code).toBe(GrpcStatus.UNAUTHENTICATED);
    const listed = await new Promise<ServiceError | null>((resolve) =>
      controlClient.listRuns({ status: "", limit: 5 }, (error) => resolve(error)),
    );
    expect(listed?.code).toBe(GrpcStatus.UNAUTHENTICATED);
    controlClient.close();
    // The CLI with a guessed token: refused by control for its token (not, say, unreachable).
    const control = await run(process.execPath, [BIN, "hold", "demo-agent", "--data-dir", dir.path], {
      env: { ...cleanEnv(), HOLDFAST_CONTROL__TOKEN: "guessed" },
    }).then(
      () => ({ code: 0, stderr: "" }),
      (error: { code: number; stderr: string }) => ({ code: error.code, stderr: error.stderr }),
    );
    expect(control.code, control.stderr).toBe(1);
    expect(control.stderr).toMatch(/bearer token is not one/i);
    expect(control.stderr).toMatch(/The token comes from/);
    expect(control.stderr).not.toMatch(/cannot reach/);
    expect(
      (JSON.parse((await holdfast("show", "demo-agent", "--json")).stdout) as { status: string }).status,
    ).not.toBe("held");
    await goesOn("after-unauthenticated");
  });

  it("sets aside a poisoned event in a run's log and goes on serving and showing that run", async () => {
    await publishRaw(
      stack().natsUrl,
      "hf.run.demo-agent.StepCompleted",
      Buffer.from([0xff, 0xff, 0xff, 0x00]),
      {
        credentials: secret("nats-admin.nk"),
      },
    );
    expect(await call("demo-agent")).toBe(200);
    const shown = await holdfast("show", "demo-agent");
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/quarantined/);
    await goesOn("after-poison");
  });

  it("meters an upstream that reports absurd usage as flagged, and goes on", async () => {
    expect(
      await call("absurd-usage", { "x-fake-usage": JSON.stringify({ completion_tokens: 2 ** 64 }) }),
    ).toBe(200);
    await waitFor(
      async () => {
        const shown = await holdfast("show", "absurd-usage", "--json");
        if (shown.code !== 0) return undefined;
        const view = JSON.parse(shown.stdout) as { in_flight: number; steps: { usage_estimate: string }[] };
        return view.in_flight === 0 && view.steps[0]?.usage_estimate === "invalid" ? true : undefined;
      },
      { timeoutMs: 20_000, message: "the absurd call was not recorded, flagged" },
    );
    await goesOn("after-absurd-usage");
  });

  it("cuts off a client that never finishes its headers, and goes on", async () => {
    const reply = await rawExchange(stack().gatewayUrl, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", {
      trickle: () => "X-Slow: 1\r\n",
      everyMs: 300,
      boundMs: 10_000,
    });
    expect(reply.closedByServer).toBe(true);
    await goesOn("after-slow-client");
  });

  it("restarts cleanly on the same data dir, budgets configured, and finds every run, the poisoned one included", async () => {
    expect(await stopUp()).toBe(0);
    await startUp();
    const listed = JSON.parse((await holdfast("ls", "--json")).stdout) as { run_id: string }[];
    expect(listed.map((r) => r.run_id)).toEqual(
      expect.arrayContaining([
        "demo-agent",
        "after-intruder",
        "after-poison",
        "absurd-usage",
        "after-slow-client",
      ]),
    );
    expect((await holdfast("show", "demo-agent")).code).toBe(0);
    await goesOn("after-restart");
  });
});
