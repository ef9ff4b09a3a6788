import { createLogger } from "@holdfast/log";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AccessPolicy } from "../access/tokens.js";
import type { ControlOperations } from "../runs/operations.js";
import { API_PREFIX, buildApp } from "./app.js";

// The control REST API's answers to requests past its listener's limits (app.inject): in
// its own {"error": {"code", "message"}} shape, before any operation is touched.
const TOKEN = "control-token-for-limits";

let app: FastifyInstance;
beforeAll(async () => {
  app = buildApp({
    operations: new Proxy({} as ControlOperations, {
      get: (_target, property) => {
        throw new Error(`operations.${String(property)} was touched: this request should have been refused`);
      },
    }),
    access: new AccessPolicy({ host: "127.0.0.1", token: TOKEN, insecure: false }),
    log: createLogger({ name: "control-test", level: "silent" }),
    limits: {
      header_timeout_ms: 1_000,
      request_timeout_ms: 2_000,
      idle_timeout_ms: 3_000,
      max_headers: 30,
      max_json_depth: 10,
    },
    health: () => ({}),
    metrics: () => 'holdfast_events_quarantined_total{service="control",reason="undecodable"} 1\n',
  });
  await app.ready();
});
afterAll(async () => {
  await app.close();
});

const post = (payload: string, headers: Record<string, string> = {}) =>
  app.inject({
    method: "POST",
    url: `${API_PREFIX}/hold`,
    payload,
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", ...headers },
  });

describe("the control API's limits", () => {
  it("answers more header fields than http.max_headers with a 431", async () => {
    const many = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`x-filler-${i}`, "v"]));
    const response = await post(JSON.stringify({ tag: "prod", reason: "r" }), many);
    expect(response.statusCode).toBe(431);
    expect(response.json()).toEqual({
      error: { code: "too_many_headers", message: expect.stringMatching(/more than 30 header fields/) },
    });
  });

  it("answers a body nested deeper than http.max_json_depth with a 400 naming the bound", async () => {
    const response = await post(`{"tag":"prod","reason":${"[".repeat(50)}${"]".repeat(50)}}`);
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({
      error: { code: "json_too_deep", message: expect.stringMatching(/more than 10 levels deep/) },
    });
  });

  it("answers a body over 64 KiB with a 413 that says so", async () => {
    const response = await post(JSON.stringify({ tag: "prod", reason: "x".repeat(70_000) }));
    expect(response.statusCode).toBe(413);
    expect(response.json()).toEqual({
      error: {
        code: "request_too_large",
        message: "The request body is larger than 65536 bytes, the most this server accepts.",
      },
    });
  });
});

describe("GET /holdfast/v1/metrics", () => {
  it("answers a token holder in Prometheus's text format", async () => {
    const response = await app.inject({
      method: "GET",
      url: `${API_PREFIX}/metrics`,
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(response.statusCode).toBe(200);
    expect(response.headers["content-type"]).toBe("text/plain; version=0.0.4; charset=utf-8");
    expect(response.body).toBe(
      'holdfast_events_quarantined_total{service="control",reason="undecodable"} 1\n',
    );
  });

  it("refuses a caller without a token, in the API's error shape", async () => {
    const response = await app.inject({ method: "GET", url: `${API_PREFIX}/metrics` });
    expect(response.statusCode).toBe(401);
    expect(response.json()).toEqual({ error: { code: "unauthenticated", message: expect.any(String) } });
  });
});
