import { AccessPolicy } from "@holdfast/access";
import type { Analytics } from "@holdfast/analytics";
import { createLogger } from "@holdfast/log";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildAnalyticsApi } from "./http.js";
import type { ProjectorStatus } from "./projector.js";

// The analytics API's refusals (app.inject), each before the engine is touched; queries
// that run are tested against embedded ClickHouse in projector.int and the e2e stacks.
const READ = "read-token-for-analytics";

let app: FastifyInstance;
beforeAll(async () => {
  app = buildAnalyticsApi({
    analytics: new Proxy({} as Analytics, {
      get: (_target, property) => {
        throw new Error(`analytics.${String(property)} was touched: this request should have been refused`);
      },
    }),
    access: new AccessPolicy(
      { host: "127.0.0.1", read_token: READ, insecure: false },
      { name: "analytics API", readOnly: "query" },
    ),
    log: createLogger({ name: "projector-test", level: "silent" }),
    limits: {
      header_timeout_ms: 1_000,
      request_timeout_ms: 2_000,
      idle_timeout_ms: 3_000,
      max_headers: 30,
      max_json_depth: 10,
    },
    status: () => ({
      running: true,
      lastError: null,
      role: "active",
      leaseHolder: "p",
      projectedSeq: 5,
      eventsProjected: 5,
      quarantined: { total: 0, by_reason: {} } as ProjectorStatus["quarantined"],
      streamLastSeq: 5,
    }),
    metrics: () => 'holdfast_events_quarantined_total{service="projector",reason="undecodable"} 0\n',
  });
  await app.ready();
});
afterAll(async () => {
  await app.close();
});

const query = (payload: string, headers: Record<string, string> = {}) =>
  app.inject({
    method: "POST",
    url: "/v1/query",
    payload,
    headers: { authorization: `Bearer ${READ}`, "content-type": "application/json", ...headers },
  });

describe("the analytics API", () => {
  it("answers /v1/query, /v1/runs and /metrics without a token, or with a wrong one, with a 401", async () => {
    for (const [method, url] of [
      ["POST", "/v1/query"],
      ["GET", "/v1/runs"],
      ["GET", "/metrics"],
    ] as const) {
      for (const headers of [{}, { authorization: "Bearer not-the-token" }]) {
        const response = await app.inject({
          method,
          url,
          headers: { "content-type": "application/json", ...headers },
          ...(method === "POST" ? { payload: JSON.stringify({ sql: "SELECT 1" }) } : {}),
        });
        expect(response.statusCode).toBe(401);
        expect(response.json().error.code).toBe("unauthenticated");
      }
    }
  });

  it("answers /metrics to a reader in Prometheus's text format", async () => {
    const response = await app.inject({
      method: "GET",
      url: "/metrics",
      headers: { authorization: `Bearer ${READ}` },
    });
    expect(response.statusCode).toBe(200);
    expect(response.headers["content-type"]).toBe("text/plain; version=0.0.4; charset=utf-8");
    expect(response.body).toBe(
      'holdfast_events_quarantined_total{service="projector",reason="undecodable"} 0\n',
    );
  });

  it("answers /health's liveness to anyone, and its details (lag, lease holder, pid) to a reader only", async () => {
    for (const headers of [{}, { authorization: "Bearer not-the-token" }]) {
      const response = await app.inject({ method: "GET", url: "/health", headers });
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual({ status: "ok" });
    }
    const read = await app.inject({
      method: "GET",
      url: "/health",
      headers: { authorization: `Bearer ${READ}` },
    });
    expect(read.statusCode).toBe(200);
    expect(read.json()).toMatchObject({ status: "ok", lag_events: 0, lease_holder: "p", pid: process.pid });
  });

  it("answers a body over 1 MiB with a 413, not a 500", async () => {
    const response = await query(JSON.stringify({ sql: `SELECT '${"x".repeat(1_100_000)}'` }));
    expect(response.statusCode).toBe(413);
    expect(response.json()).toEqual({
      error: {
        code: "request_too_large",
        message: "The request body is larger than 1048576 bytes, the most this server accepts.",
      },
    });
  });

  it("answers a body nested deeper than http.max_json_depth with a 400 naming the bound", async () => {
    const response = await query(`{"sql":"SELECT 1","x":${"[".repeat(200_000)}${"]".repeat(200_000)}}`);
    expect(response.statusCode).toBe(400);
    expect(response.json().error).toEqual({
      code: "json_too_deep",
      message: expect.stringMatching(/more than 10 levels deep/),
    });
  });

  it("answers a body of a type it does not read with fastify's 415, not a 500", async () => {
    const response = await query("<sql>SELECT 1</sql>", { "content-type": "application/xml" });
    expect(response.statusCode).toBe(415);
    expect(response.json().error.code).toBe("bad_request");
  });

  it("answers more header fields than http.max_headers with a 431", async () => {
    const many = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`x-filler-${i}`, "v"]));
    const response = await query(JSON.stringify({ sql: "SELECT 1" }), many);
    expect(response.statusCode).toBe(431);
    expect(response.json().error.code).toBe("too_many_headers");
  });
});
