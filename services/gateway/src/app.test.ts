import { gzipSync } from "node:zlib";
import { createLogger } from "@holdfast/log";
import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildApp, type GatewayAppDeps } from "./app.js";
import { InvalidRequestError } from "./errors.js";
import { sha256Hex, TenantKeys } from "./tenants/keys.js";

// Route logic without I/O (app.inject): what the gateway answers itself, before it would
// record or forward anything, in the error envelope of the API the client speaks. Every
// dependency that records, identifies or forwards is a tripwire: touching one fails the test.
// (Dot segments are tested over a real socket, in hardening.e2e: inject resolves them first.)

function tripwire<T extends object>(name: string): T {
  return new Proxy({} as T, {
    get: (_target, property) => {
      throw new Error(`${name}.${String(property)} was touched: this request should not reach it`);
    },
  });
}

let app: FastifyInstance;
let live = true;
let deps: GatewayAppDeps;
beforeAll(async () => {
  deps = {
    log: createLogger({ name: "gateway-test", level: "silent" }),
    maxBodyBytes: 1_024,
    maxAnswerBytes: 1_024,
    maxEventBytes: 1_024,
    limits: {
      header_timeout_ms: 1_000,
      request_timeout_ms: 2_000,
      idle_timeout_ms: 3_000,
      max_headers: 50,
      max_json_depth: 16,
    },
    ledger: tripwire("ledger"),
    upstreams: tripwire("upstreams"),
    pricer: tripwire("pricer"),
    responses: tripwire("responses"),
    admission: tripwire("admission"),
    limitsFor: () => {
      throw new Error("a run's limits were read: this request should have been refused first");
    },
    rules: () => {
      throw new Error("the standing rules were read: this request should have been refused first");
    },
    costControlled: () => {
      throw new Error("a run's cost control was read: this request should have been refused first");
    },
    onTrip: "hold",
    waiting: tripwire("waiting"),
    passthrough: {
      mode: "allow",
      runOf: () => {
        throw new Error(
          "the passed-through call's run was read: this request should have been refused first",
        );
      },
    },
    instanceId: "test#0",
    newId: () => {
      throw new Error("an id was made: this request should not have been recorded");
    },
    resolveRun: () => {
      throw new Error("the run was resolved: this request should have been refused first");
    },
    logConnected: () => true,
    onRecordError: () => {},
    health: {
      live: () => live,
      details: () => ({ runs_held: 3, peer_gateways: false }),
      mayRead: (authorization) => authorization === "Bearer read-token",
      metrics: () =>
        '# TYPE holdfast_events_quarantined_total counter\nholdfast_events_quarantined_total{service="gateway",reason="undecodable"} 2\n',
    },
  };
  app = buildApp(deps);
  await app.ready();
});
afterAll(async () => {
  await app.close();
});

const OPENAI = { path: "/v1/chat/completions", family: "openai" } as const;
const RESPONSES = { path: "/v1/responses", family: "openai" } as const;
const MESSAGES = { path: "/v1/messages", family: "anthropic" } as const;

/** The error as the client's SDK would read it, whichever envelope it came in. */
function errorOf(
  family: "openai" | "anthropic",
  body: string,
): { type: string; message: string; param?: unknown } {
  const json = JSON.parse(body) as {
    type?: string;
    error: { type: string; message: string; param?: unknown; code?: unknown };
  };
  if (family === "anthropic") {
    expect(json.type).toBe("error");
    expect(Object.keys(json.error).sort()).toEqual(["message", "type"]);
  } else {
    expect(Object.keys(json.error).sort()).toEqual(["code", "message", "param", "type"]);
  }
  return json.error;
}

describe("requests the gateway refuses itself, in the client's own error shape", () => {
  it.each([OPENAI, RESPONSES, MESSAGES])(
    "$path: a body that is not JSON is a 400",
    async ({ path, family }) => {
      const response = await app.inject({
        method: "POST",
        url: path,
        payload: "{not json",
        headers: { "content-type": "application/json" },
      });
      expect(response.statusCode).toBe(400);
      expect(errorOf(family, response.body)).toMatchObject({ type: "invalid_request_error" });
      expect(errorOf(family, response.body).message).toMatch(/JSON/);
    },
  );

  it.each([
    [OPENAI, { model: "gpt-4o-mini", messages: "hello" }, "messages"],
    [RESPONSES, { model: "gpt-4o-mini", input: 42 }, "input"],
    [MESSAGES, { model: "claude-3-5-haiku-20241022", max_tokens: 5, messages: { role: "user" } }, "messages"],
    [MESSAGES, { model: "", max_tokens: 5, messages: [] }, "model"],
  ])(
    "%o: a field the gateway relies on that is wrong is a 400 naming it",
    async ({ path, family }, payload, field) => {
      const response = await app.inject({ method: "POST", url: path, payload });
      expect(response.statusCode).toBe(400);
      const error = errorOf(family, response.body);
      expect(error.type).toBe("invalid_request_error");
      if (family === "openai") expect(error.param).toBe(field);
      else expect(error.message).toContain(field);
    },
  );

  it.each([
    [OPENAI, { messages: [{ role: "user", content: "hi" }] }],
    [RESPONSES, { input: "hi" }],
    [MESSAGES, { max_tokens: 5, messages: [{ role: "user", content: "hi" }] }],
  ])(
    "%o: a model's name longer than its events record is a 400 naming the field and the bound, before anything is recorded or forwarded",
    async ({ path, family }, rest) => {
      const response = await app.inject({
        method: "POST",
        url: path,
        payload: { model: "m".repeat(300), ...rest },
      });
      expect(response.statusCode).toBe(400);
      const error = errorOf(family, response.body) as {
        type: string;
        message: string;
        param?: unknown;
        code?: unknown;
      };
      expect(error.type).toBe("invalid_request_error");
      expect(error.message).toMatch(/model is 300 characters long; Holdfast accepts at most 256/);
      if (family === "openai") expect(error).toMatchObject({ param: "model", code: "field_too_long" });
    },
  );

  it.each([OPENAI, MESSAGES])("$path: an encoding it cannot decode is a 415", async ({ path, family }) => {
    const response = await app.inject({
      method: "POST",
      url: path,
      payload: Buffer.from("{}"),
      headers: { "content-type": "application/json", "content-encoding": "zstd" },
    });
    expect(response.statusCode).toBe(415);
    expect(errorOf(family, response.body).message).toMatch(/zstd/);
  });

  it.each([OPENAI, RESPONSES, MESSAGES])(
    "$path: a body over gateway.max_body_bytes, decoded, is a 413",
    async ({ path, family }) => {
      const big = JSON.stringify({ model: "m", padding: "x".repeat(4_096) });
      const response = await app.inject({
        method: "POST",
        url: path,
        payload: gzipSync(big),
        headers: { "content-type": "application/json", "content-encoding": "gzip" },
      });
      expect(response.statusCode).toBe(413);
      expect(errorOf(family, response.body).message).toMatch(/max_body_bytes/);
    },
  );

  it.each([OPENAI, RESPONSES, MESSAGES])(
    "$path: more header fields than http.max_headers is a 431, whatever the run headers say",
    async ({ path, family }) => {
      const headers: Record<string, string> = { "x-holdfast-run": "first" };
      for (let i = 0; i < 60; i++) headers[`x-filler-${i}`] = "v";
      const response = await app.inject({ method: "POST", url: path, payload: {}, headers });
      expect(response.statusCode).toBe(431);
      expect(errorOf(family, response.body).message).toMatch(/more than 50 header fields/);
    },
  );

  it.each([OPENAI, RESPONSES, MESSAGES])(
    "$path: a body nested deeper than http.max_json_depth is a 400 naming the bound, before it is read",
    async ({ path, family }) => {
      const response = await app.inject({
        method: "POST",
        url: path,
        payload: `{"model":"m","messages":[],"metadata":${"[".repeat(200)}${"]".repeat(200)}}`,
        headers: { "content-type": "application/json" },
      });
      expect(response.statusCode).toBe(400);
      const error = errorOf(family, response.body);
      expect(error.type).toBe("invalid_request_error");
      expect(error.message).toMatch(/more than 16 levels deep.*http\.max_json_depth/);
    },
  );

  it("answers a path it does not serve with a 404 in OpenAI's shape", async () => {
    const response = await app.inject({ method: "GET", url: "/nowhere" });
    expect(response.statusCode).toBe(404);
    expect(errorOf("openai", response.body).message).toContain("/nowhere");
  });
});

describe("/holdfast/health", () => {
  it("answers liveness to anyone, with no pid and no counts", async () => {
    for (const authorization of [undefined, "Bearer sk-an-agents-provider-key"]) {
      const response = await app.inject({
        method: "GET",
        url: "/holdfast/health",
        headers: authorization === undefined ? {} : { authorization },
      });
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual({ status: "ok" });
    }
  });

  it("shows its details to a reader", async () => {
    const response = await app.inject({
      method: "GET",
      url: "/holdfast/health",
      headers: { authorization: "Bearer read-token" },
    });
    expect(response.json()).toEqual({ status: "ok", pid: process.pid, runs_held: 3, peer_gateways: false });
  });

  it("is a 503 while the event log is unreachable", async () => {
    live = false;
    try {
      const response = await app.inject({ method: "GET", url: "/holdfast/health" });
      expect(response.statusCode).toBe(503);
      expect(response.json()).toEqual({ status: "log_unreachable" });
    } finally {
      live = true;
    }
  });

  it("answers /holdfast/live 200 while the event log is unreachable: the process lives, a probe must not restart it", async () => {
    live = false;
    try {
      const response = await app.inject({ method: "GET", url: "/holdfast/live" });
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual({ status: "ok" });
    } finally {
      live = true;
    }
  });
});

describe("/holdfast/metrics", () => {
  it("answers a reader in Prometheus's text format", async () => {
    const response = await app.inject({
      method: "GET",
      url: "/holdfast/metrics",
      headers: { authorization: "Bearer read-token" },
    });
    expect(response.statusCode).toBe(200);
    expect(response.headers["content-type"]).toBe("text/plain; version=0.0.4; charset=utf-8");
    expect(response.body).toContain(
      'holdfast_events_quarantined_total{service="gateway",reason="undecodable"} 2\n',
    );
  });

  it("refuses anyone else with a 401 in the provider's error shape (an agent's provider key is no token)", async () => {
    for (const authorization of [undefined, "Bearer sk-an-agents-provider-key"]) {
      const response = await app.inject({
        method: "GET",
        url: "/holdfast/metrics",
        headers: authorization === undefined ? {} : { authorization },
      });
      expect(response.statusCode).toBe(401);
      expect(errorOf("openai", response.body)).toMatchObject({
        type: "authentication_error",
        message: expect.stringContaining("control.read_token"),
      });
      expect(JSON.parse(response.body).error.code).toBe("unauthenticated");
      expect(response.body).not.toContain("holdfast_events_quarantined_total");
    }
  });
});

describe("with tenants configured, a call without its tenant's gateway key", () => {
  const ACME_KEY = "hfk_acme-0123456789abcdefghijklmnopqrstuvwxyzABCD";
  let tenanted: FastifyInstance;
  /** The tenant each call that got past its key was resolved with. */
  const resolvedWith: (string | undefined)[] = [];
  beforeAll(async () => {
    tenanted = buildApp({
      ...deps,
      tenantKeys: new TenantKeys({ acme: { keys_sha256: [sha256Hex(ACME_KEY)] } }),
      resolveRun: async (_headers, _body, _view, keyTenant) => {
        resolvedWith.push(keyTenant);
        throw new InvalidRequestError("resolved: the test stops the call here");
      },
    });
    await tenanted.ready();
  });
  afterAll(async () => {
    await tenanted?.close();
  });

  const PASSED_THROUGH = [
    { path: "/v1/models", family: "openai", method: "GET" },
    { path: "/v1/messages/count_tokens", family: "anthropic", method: "POST" },
  ] as const;
  const METERED = [OPENAI, RESPONSES, MESSAGES].map((route) => ({ ...route, method: "POST" as const }));

  it.each([...METERED, ...PASSED_THROUGH])(
    "$method $path: none is a 401 in its API's shape, before anything is read, forwarded or recorded",
    async ({ path, family, method }) => {
      for (const headers of [{}, { "x-holdfast-key": "" }, { "x-holdfast-tenant": "acme" }]) {
        const response = await tenanted.inject({
          method,
          url: path,
          headers: { authorization: "Bearer sk-provider-key-0123456789", ...headers },
          ...(method === "POST" ? { payload: { model: "gpt-4o-mini", messages: [] } } : {}),
        });
        expect(response.statusCode).toBe(401);
        const error = errorOf(family, response.body);
        expect(error).toMatchObject({ type: "authentication_error" });
        if (family === "openai") expect(error).toMatchObject({ code: "holdfast_key_required" });
        expect(error.message).toMatch(/X-Holdfast-Key/);
      }
    },
  );

  it.each([...METERED, ...PASSED_THROUGH])(
    "$method $path: a key no tenant has is a 401, and the key is not echoed",
    async ({ path, family, method }) => {
      const unknown = "hfk_not-a-key-anyone-was-given-0123456789abcdef";
      for (const key of [unknown, `${ACME_KEY}x`, ACME_KEY.toUpperCase()]) {
        const response = await tenanted.inject({
          method,
          url: path,
          headers: { "x-holdfast-key": key },
          ...(method === "POST" ? { payload: { model: "gpt-4o-mini", messages: [] } } : {}),
        });
        expect(response.statusCode).toBe(401);
        const error = errorOf(family, response.body);
        expect(error).toMatchObject({ type: "authentication_error" });
        if (family === "openai") expect(error).toMatchObject({ code: "holdfast_key_unknown" });
        expect(response.body).not.toContain(key);
      }
    },
  );

  it("a key sent twice is no key: a 401", async () => {
    const response = await tenanted.inject({
      method: "POST",
      url: OPENAI.path,
      headers: { "x-holdfast-key": [ACME_KEY, ACME_KEY] },
      payload: { model: "gpt-4o-mini", messages: [] },
    });
    expect(response.statusCode).toBe(401);
  });

  it.each(METERED)(
    "$path: a tenant's key gets the call on, as its tenant's, whatever X-Holdfast-Tenant says",
    async ({ path }) => {
      resolvedWith.length = 0;
      const response = await tenanted.inject({
        method: "POST",
        url: path,
        headers: { "x-holdfast-key": ` ${ACME_KEY} `, "x-holdfast-tenant": "globex" },
        payload:
          path === MESSAGES.path
            ? {
                model: "claude-3-5-haiku-20241022",
                max_tokens: 5,
                messages: [{ role: "user", content: "hi" }],
              }
            : path === RESPONSES.path
              ? { model: "gpt-4o-mini", input: "hi" }
              : { model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] },
      });
      expect(response.statusCode).toBe(400);
      expect(response.body).toContain("the test stops the call here");
      expect(resolvedWith).toEqual(["acme"]);
    },
  );

  it("/holdfast/health needs no tenant's key", async () => {
    const response = await tenanted.inject({ method: "GET", url: "/holdfast/health" });
    expect(response.statusCode).toBe(200);
  });
});

describe("with gateway.passthrough: deny_models", () => {
  let denying: FastifyInstance;
  beforeAll(async () => {
    denying = buildApp({ ...deps, passthrough: { ...deps.passthrough, mode: "deny_models" } });
    await denying.ready();
  });
  afterAll(async () => {
    await denying?.close();
  });

  it.each([
    { path: "/v1/completions", family: "openai", payload: { model: "gpt-3.5-turbo-instruct", prompt: "hi" } },
    {
      path: "/v1/embeddings?x=1",
      family: "openai",
      payload: { model: "text-embedding-3-small", input: "hi" },
    },
    {
      path: "/v1/batches",
      family: "openai",
      payload: { input_file_id: "file-1", endpoint: "/v1/chat/completions" },
    },
    { path: "/v1/messages/batches", family: "anthropic", payload: { requests: [] } },
    { path: "/v1/complete", family: "anthropic", payload: { model: "claude-2.1", prompt: "hi" } },
  ] as const)(
    "POST $path: a 403 in its API's shape, before anything is forwarded or its run read",
    async ({ path, family, payload }) => {
      const response = await denying.inject({
        method: "POST",
        url: path,
        payload,
        headers: { "x-holdfast-run": "r" },
      });
      expect(response.statusCode).toBe(403);
      const error = errorOf(family, response.body);
      expect(error.type).toBe("permission_error");
      if (family === "openai") expect(error).toMatchObject({ code: "holdfast_unmetered_model_path" });
      expect(error.message).toMatch(/gateway\.passthrough: deny_models/);
      expect(error.message).toContain(path.split("?")[0]);
    },
  );
});
