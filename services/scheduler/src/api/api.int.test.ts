import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import { connect, GrpcStatus, type ServiceError } from "@holdfast/grpc";
import { createLogger } from "@holdfast/log";
import { RunsClient, type SubmitRunResponse } from "@holdfast/proto";
import { makeTempDir, natsUrl, uniqueNamespace } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningScheduler, startScheduler } from "../service.js";

// The durable-run API as clients and workers meet it: the scheduler on real sockets, over
// the harness's nats-server, with the control tokens set, as `holdfast up --config` runs it.

const CONTROL = "control-secret-0123456789";
const READ = "read-secret-0123456789";
const log = createLogger({ name: "scheduler-api-test", level: "silent" });
let dir: Awaited<ReturnType<typeof makeTempDir>>;
let scheduler: RunningScheduler;

function configWith(overrides: DeepPartial<Config>): Config {
  return loadConfig({
    env: {},
    overrides: {
      data_dir: dir.path,
      nats: { url: natsUrl(), prefix: uniqueNamespace("sched-api") },
      scheduler: { host: "127.0.0.1", grpc_port: 0, port: 0 },
      ...overrides,
    },
  });
}

beforeAll(async () => {
  dir = await makeTempDir("scheduler-api");
  scheduler = await startScheduler(configWith({ control: { token: CONTROL, read_token: READ } }), log);
  const deployed = await rest("POST", "/v1/agents/echo/deployments", { version: "v1" });
  expect(deployed.status).toBe(200);
});

afterAll(async () => {
  await scheduler?.close();
  await dir?.[Symbol.asyncDispose]();
});

function client(token: string | undefined): RunsClient {
  return connect(RunsClient, {
    address: scheduler.grpcAddress,
    ...(token === undefined ? {} : { metadata: { authorization: `Bearer ${token}` } }),
  });
}

async function rest(
  method: string,
  path: string,
  body?: unknown,
  token: string | null = CONTROL,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`${scheduler.url}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** How a server stream or a worker's session ends: its status, or OK once the scheduler spoke. */
function streamOutcome(
  open: (c: RunsClient, deadline: number) => NodeJS.EventEmitter & { cancel(): void },
  token: string | undefined,
): Promise<{ code: GrpcStatus; details: string }> {
  const c = client(token);
  // A refusal comes at once; a stream left hanging ends at this deadline instead of the test's.
  const stream = open(c, Date.now() + 15_000);
  return new Promise((resolve) => {
    const done = (outcome: { code: GrpcStatus; details: string }) => {
      stream.cancel();
      c.close();
      resolve(outcome);
    };
    stream.on("data", () => done({ code: GrpcStatus.OK, details: "" }));
    stream.on("error", (error: ServiceError) => done({ code: error.code, details: error.details }));
  });
}

const work = (c: RunsClient, deadline: number) => {
  const session = c.work({ deadline });
  session.write({
    message: {
      $case: "hello",
      value: { worker: "test-worker", agents: [{ agent: "echo", version: "v1" }], slots: 1, leases: [] },
    },
  });
  return session;
};

describe("the runs API's streams", () => {
  it("refuses a worker's session without a valid token at once: UNAUTHENTICATED, or PERMISSION_DENIED for the read-only token", async () => {
    expect(await streamOutcome(work, undefined)).toMatchObject({ code: GrpcStatus.UNAUTHENTICATED });
    expect(await streamOutcome(work, "not-the-token")).toMatchObject({ code: GrpcStatus.UNAUTHENTICATED });
    const read = await streamOutcome(work, READ);
    expect(read.code).toBe(GrpcStatus.PERMISSION_DENIED);
    expect(read.details).toMatch(/read-only/);
    // The control token's session is welcomed.
    expect(await streamOutcome(work, CONTROL)).toMatchObject({ code: GrpcStatus.OK });
  });

  it("refuses a watch without a valid token at once: UNAUTHENTICATED", async () => {
    const { run } = (await submit({ input: { n: 1 } })).body as { run: { run_id: string } };
    const watch = (c: RunsClient, deadline: number) => c.watch({ runId: run.run_id }, { deadline });
    expect(await streamOutcome(watch, undefined)).toMatchObject({ code: GrpcStatus.UNAUTHENTICATED });
    expect(await streamOutcome(watch, "not-the-token")).toMatchObject({ code: GrpcStatus.UNAUTHENTICATED });
    // Reading needs only the read-only token: the run's first event comes.
    expect(await streamOutcome(watch, READ)).toMatchObject({ code: GrpcStatus.OK });
  });
});

describe("with a worker token (scheduler.worker_token)", () => {
  const WORKER = "worker-secret-0123456789";

  it("serves runs only to a worker with it: an operator's token may not, and the worker token may do nothing else", async () => {
    const own = await startScheduler(
      configWith({ control: { token: CONTROL, read_token: READ }, scheduler: { worker_token: WORKER } }),
      log,
    );
    const onOwn = (token: string | undefined) => {
      const c = connect(RunsClient, {
        address: own.grpcAddress,
        ...(token === undefined ? {} : { metadata: { authorization: `Bearer ${token}` } }),
      });
      return c;
    };
    const sessionWith = (token: string | undefined) =>
      new Promise<{ code: GrpcStatus; details: string }>((resolve) => {
        const c = onOwn(token);
        const session = work(c, Date.now() + 15_000);
        const done = (outcome: { code: GrpcStatus; details: string }) => {
          session.cancel();
          c.close();
          resolve(outcome);
        };
        session.on("data", () => done({ code: GrpcStatus.OK, details: "" }));
        session.on("error", (error: ServiceError) => done({ code: error.code, details: error.details }));
      });
    try {
      const operator = await sessionWith(CONTROL);
      expect(operator.code).toBe(GrpcStatus.PERMISSION_DENIED);
      expect(operator.details).toMatch(/operator's token may not serve runs.*scheduler\.worker_token/);
      expect((await sessionWith(READ)).code).toBe(GrpcStatus.PERMISSION_DENIED);
      expect((await sessionWith("not-the-token")).code).toBe(GrpcStatus.UNAUTHENTICATED);
      expect(await sessionWith(WORKER)).toMatchObject({ code: GrpcStatus.OK });
      // The worker token submits nothing, reads nothing.
      const c = onOwn(WORKER);
      const refused = await new Promise<ServiceError | undefined>((resolve) =>
        c.submit(
          {
            agent: "echo",
            inputJson: "{}",
            partitionKey: "",
            timeoutSeconds: 0,
            idempotencyKey: "",
            tenant: "",
            tag: "",
          },
          (error) => resolve(error ?? undefined),
        ),
      );
      expect(refused?.code).toBe(GrpcStatus.UNAUTHENTICATED);
      c.close();
    } finally {
      await own.close();
    }
  });
});

function submit(body: Record<string, unknown>, token: string | null = CONTROL) {
  return rest("POST", "/v1/agents/echo/runs", body, token);
}

function grpcSubmit(
  c: RunsClient,
  request: { inputJson: string; idempotencyKey: string; partitionKey?: string },
): Promise<SubmitRunResponse> {
  return new Promise((resolve, reject) =>
    c.submit(
      {
        agent: "echo",
        inputJson: request.inputJson,
        partitionKey: request.partitionKey ?? "",
        timeoutSeconds: 0,
        idempotencyKey: request.idempotencyKey,
        tenant: "",
        tag: "",
      },
      (error, response) => (error ? reject(error) : resolve(response)),
    ),
  );
}

describe("idempotency keys", () => {
  it("answers the same key with the same input with the run it made, over REST and gRPC", async () => {
    const first = await submit({ input: { order: 7, lines: [1, 2] }, idempotency_key: "order-7" });
    expect(first.status).toBe(201);
    const run = (first.body.run as { run_id: string }).run_id;
    // The same JSON value, written with other spacing and key order, is the same input.
    const again = await submit({ idempotency_key: "order-7", input: { lines: [1, 2], order: 7 } });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ created: false, run: { run_id: run } });
    const c = client(CONTROL);
    try {
      const answer = await grpcSubmit(c, {
        inputJson: '{ "lines": [1, 2], "order": 7 }',
        idempotencyKey: "order-7",
      });
      expect(answer.created).toBe(false);
      expect(answer.run?.runId).toBe(run);
    } finally {
      c.close();
    }
  });

  it("refuses the same key with another input, naming the key: REST 409 idempotency_key_reused, gRPC ALREADY_EXISTS", async () => {
    const first = await submit({ input: { order: 8 }, idempotency_key: "order-8" });
    expect(first.status).toBe(201);
    const run = (first.body.run as { run_id: string }).run_id;

    const other = await submit({ input: { order: 9 }, idempotency_key: "order-8" });
    expect(other.status).toBe(409);
    const error = other.body.error as { code: string; message: string };
    expect(error.code).toBe("idempotency_key_reused");
    expect(error.message).toContain('"order-8"');
    expect(error.message).toContain(run);

    // The key in the header, as many HTTP clients send it, is the same key.
    const byHeader = await fetch(`${scheduler.url}/v1/agents/echo/runs`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${CONTROL}`,
        "content-type": "application/json",
        "idempotency-key": "order-8",
      },
      body: JSON.stringify({ input: { order: 10 } }),
    });
    expect(byHeader.status).toBe(409);

    // Another partition key is another submission too.
    const moved = await submit({ input: { order: 8 }, idempotency_key: "order-8", partition_key: "acme" });
    expect(moved.status).toBe(409);

    const c = client(CONTROL);
    try {
      const refused = await grpcSubmit(c, { inputJson: '{"order":9}', idempotencyKey: "order-8" }).then(
        () => undefined,
        (e: ServiceError) => e,
      );
      expect(refused?.code).toBe(GrpcStatus.ALREADY_EXISTS);
      expect(refused?.details).toContain('"order-8"');
      expect(refused?.metadata.get("holdfast-error-code")).toEqual(["idempotency_key_reused"]);
    } finally {
      c.close();
    }

    // Nothing was recorded by the refusals: the run is as first submitted.
    const shown = await rest("GET", `/v1/runs/${run}`);
    expect(shown.body.run).toMatchObject({
      run_id: run,
      input: { order: 8 },
      idempotency_key: "order-8",
      partition_key: "",
    });
  });
});

describe("REST answers", () => {
  it("are snake_case, with every field of a run, its input and output as JSON values", async () => {
    const submitted = await submit({ input: { text: "tide" }, partition_key: "acme" });
    const run = submitted.body.run as Record<string, unknown>;
    expect(Object.keys(run).filter((key) => /[A-Z]/.test(key))).toEqual([]);
    expect(run).toMatchObject({
      agent: "echo",
      version: "v1",
      status: "queued",
      input: { text: "tide" },
      output: null,
      failure: null,
      partition_key: "acme",
      idempotency_key: "",
      steps_recorded: 0,
      model_calls: 0,
      ended_ms: 0,
      caps: { ceiling_ms: expect.any(Number), concurrency_per_key: 0, starts_per_minute: 0 },
      steps: [],
    });
    const { agents } = (await rest("GET", "/v1/agents")).body as { agents: Record<string, unknown>[] };
    expect(agents.find((a) => a.agent === "echo")).toMatchObject({
      version: "v1",
      workers: 0,
      workers_on_version: 0,
      deployed_ms: expect.any(Number),
    });
  });
});
