import { AccessPolicy } from "@holdfast/access";
import { createLogger } from "@holdfast/log";
import { DurableRun, DurableStatus } from "@holdfast/proto";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunsOperations } from "../runs/operations.js";
import { buildRunsApp } from "./http.js";

// The runs REST API's answers to requests past its listener's limits (app.inject): in its
// own {"error": {"code", "message"}} shape, before any operation is touched. The one run
// it can get is one a worker finished with an output nested 5,000 levels deep (over gRPC).
const DEEP = 5_000;
const finished = DurableRun.fromPartial({
  runId: "deep-output",
  agent: "research",
  status: DurableStatus.DURABLE_STATUS_FINISHED,
  inputJson: '{"topic":"x"}',
  outputJson: "[".repeat(DEEP) + "]".repeat(DEEP),
});

let app: FastifyInstance;
beforeAll(async () => {
  app = buildRunsApp({
    operations: new Proxy({} as RunsOperations, {
      get: (_target, property) => {
        if (property === "get") return async () => finished;
        throw new Error(`operations.${String(property)} was touched: this request should have been refused`);
      },
    }),
    access: new AccessPolicy({ host: "127.0.0.1", insecure: false }, { name: "runs API", readOnly: "read" }),
    log: createLogger({ name: "scheduler-test", level: "silent" }),
    limits: {
      header_timeout_ms: 1_000,
      request_timeout_ms: 2_000,
      idle_timeout_ms: 3_000,
      max_headers: 30,
      max_json_depth: 10,
    },
    health: () => ({}),
    metrics: () => "",
  });
  await app.ready();
});
afterAll(async () => {
  await app.close();
});

const submit = (payload: string, headers: Record<string, string> = {}) =>
  app.inject({
    method: "POST",
    url: "/v1/agents/research/runs",
    payload,
    headers: { "content-type": "application/json", ...headers },
  });

describe("the runs API's limits", () => {
  it("answers a body over 2 MB with a 413, not a 500", async () => {
    const response = await submit(JSON.stringify({ input: "x".repeat(2_500_000) }));
    expect(response.statusCode).toBe(413);
    expect(response.json()).toEqual({
      error: {
        code: "request_too_large",
        message: "The request body is larger than 2000000 bytes, the most this server accepts.",
      },
    });
  });

  it("answers an input nested deeper than http.max_json_depth with a 400 naming the bound", async () => {
    const response = await submit(`{"input":${"[".repeat(200_000)}${"]".repeat(200_000)}}`);
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({
      error: { code: "json_too_deep", message: expect.stringMatching(/more than 10 levels deep/) },
    });
  });

  it("answers more header fields than http.max_headers with a 431", async () => {
    const many = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`x-filler-${i}`, "v"]));
    const response = await submit(JSON.stringify({ input: 1 }), many);
    expect(response.statusCode).toBe(431);
    expect(response.json().error.code).toBe("too_many_headers");
  });

  it("shows an output nested deeper than http.max_json_depth as its text, rather than failing", async () => {
    const response = await app.inject({ method: "GET", url: "/v1/runs/deep-output" });
    expect(response.statusCode).toBe(200);
    expect(response.json().run).toMatchObject({
      run_id: "deep-output",
      status: "finished",
      input: { topic: "x" },
      output: finished.outputJson,
    });
  });
});

describe("GET /holdfast/health", () => {
  it("answers liveness to anyone, and the pid and the queue's counts to a reader only", async () => {
    const READ = "read-token-for-runs-health";
    const guarded = buildRunsApp({
      operations: {} as RunsOperations,
      access: new AccessPolicy(
        { host: "127.0.0.1", read_token: READ, insecure: false },
        { name: "runs API", readOnly: "read" },
      ),
      log: createLogger({ name: "scheduler-test", level: "silent" }),
      limits: {
        header_timeout_ms: 1_000,
        request_timeout_ms: 2_000,
        idle_timeout_ms: 3_000,
        max_headers: 30,
        max_json_depth: 10,
      },
      health: () => ({ pid: process.pid, queued: 3 }),
      metrics: () => "",
    });
    try {
      for (const headers of [{}, { authorization: "Bearer not-the-token" }]) {
        const anyone = await guarded.inject({ method: "GET", url: "/holdfast/health", headers });
        expect(anyone.statusCode).toBe(200);
        expect(anyone.json()).toEqual({ status: "ok" });
      }
      const read = await guarded.inject({
        method: "GET",
        url: "/holdfast/health",
        headers: { authorization: `Bearer ${READ}` },
      });
      expect(read.statusCode).toBe(200);
      expect(read.json()).toEqual({ status: "ok", pid: process.pid, queued: 3 });
    } finally {
      await guarded.close();
    }
  });
});

describe("GET /holdfast/metrics", () => {
  it("answers a reader in Prometheus's text format, and a caller without a token with a 401", async () => {
    const READ = "read-token-for-runs";
    const guarded = buildRunsApp({
      operations: {} as RunsOperations,
      access: new AccessPolicy(
        { host: "127.0.0.1", read_token: READ, insecure: false },
        { name: "runs API", readOnly: "read" },
      ),
      log: createLogger({ name: "scheduler-test", level: "silent" }),
      limits: {
        header_timeout_ms: 1_000,
        request_timeout_ms: 2_000,
        idle_timeout_ms: 3_000,
        max_headers: 30,
        max_json_depth: 10,
      },
      health: () => ({}),
      metrics: () => 'holdfast_events_quarantined_total{service="scheduler",reason="undecodable"} 4\n',
    });
    try {
      const read = await guarded.inject({
        method: "GET",
        url: "/holdfast/metrics",
        headers: { authorization: `Bearer ${READ}` },
      });
      expect(read.statusCode).toBe(200);
      expect(read.headers["content-type"]).toBe("text/plain; version=0.0.4; charset=utf-8");
      expect(read.body).toBe(
        'holdfast_events_quarantined_total{service="scheduler",reason="undecodable"} 4\n',
      );
      const refused = await guarded.inject({ method: "GET", url: "/holdfast/metrics" });
      expect(refused.statusCode).toBe(401);
      expect(refused.json()).toEqual({ error: { code: "unauthenticated", message: expect.any(String) } });
    } finally {
      await guarded.close();
    }
  });
});
