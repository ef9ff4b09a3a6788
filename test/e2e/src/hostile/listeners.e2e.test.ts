import { once } from "node:events";
import { connect as http2Connect } from "node:http2";
import { RunsApi } from "@holdfast/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY } from "../stack.js";
import { type Fleet, startFleet } from "./fleet.js";
import { rawExchange, requestBytes } from "./wire.js";

// The hostile-peer suite: what a request may carry. Every listener (the gateway, control,
// the projector's analytics API, the scheduler's REST API) refuses more header fields than
// http.max_headers with a 431 (where Node would drop those past its 2,000th unread), a JSON
// body nested deeper than http.max_json_depth with a 400, and a body over its limit with a
// 413, each in its own error shape; the projector's SQL and every service's health details
// need the read or control token. After each attack a model call through the gateway is still metered.
const TOKEN = "control-token-for-hostile-listeners";
const READ = "read-token-for-hostile-listeners-0";

let fleet: Fleet;
beforeAll(async () => {
  fleet = await startFleet({
    control: { token: TOKEN, read_token: READ },
    gateway: { max_body_bytes: 1_000_000 },
  });
});
afterAll(async () => {
  await fleet?.close();
});

/** One request as written, with `headers` after the usual ones; resolves when the server closes. */
function send(origin: string, method: string, path: string, headers: string[], body = "") {
  return rawExchange(
    origin,
    requestBytes(
      origin,
      method,
      path,
      [
        "Content-Type: application/json",
        `Content-Length: ${Buffer.byteLength(body)}`,
        "Connection: close",
        ...headers,
      ],
      body,
    ),
  );
}

const CHAT = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hello" }] });
/** 2,000 header fields of five bytes each: well within Node's 16 KiB of header bytes. */
const FILLER = Array.from({ length: 2_000 }, () => "x:1");
const nested = (levels: number) => "[".repeat(levels) + "]".repeat(levels);

/** Each listener, a route of it that reads a JSON body, and how it is authorized. */
const LISTENERS = [
  ["gateway", () => fleet.gateway, "/v1/chat/completions", `Bearer ${API_KEY}`],
  ["control", () => fleet.control, "/holdfast/v1/hold", `Bearer ${TOKEN}`],
  ["projector", () => fleet.projector, "/v1/query", `Bearer ${READ}`],
  ["scheduler", () => fleet.scheduler, "/v1/agents/research/runs", `Bearer ${TOKEN}`],
] as const;

/** The error as each API writes it: OpenAI's shape on the gateway's chat route, {error: {code, message}} elsewhere. */
function errorCode(name: string, body: string): string {
  const parsed = JSON.parse(body) as { error: { code: string; message: string; type?: string } };
  if (name === "gateway")
    expect(Object.keys(parsed.error).sort()).toEqual(["code", "message", "param", "type"]);
  else expect(Object.keys(parsed.error).sort()).toEqual(["code", "message"]);
  return parsed.error.code;
}

describe("more header fields than http.max_headers", () => {
  it.each(LISTENERS)("is a 431 on the %s, in its shape", async (name, origin, path, authorization) => {
    const reply = await send(origin(), "POST", path, [`Authorization: ${authorization}`, ...FILLER], "{}");
    expect(reply.status).toBe(431);
    expect(errorCode(name, reply.body)).toBe("too_many_headers");
    await fleet.metered(`after-headers-${name}`);
  });

  it("is a 431 in Anthropic's shape on its route", async () => {
    const reply = await send(
      fleet.gateway,
      "POST",
      "/v1/messages",
      [`x-api-key: ${API_KEY}`, "anthropic-version: 2023-06-01", ...FILLER],
      "{}",
    );
    expect(reply.status).toBe(431);
    expect(JSON.parse(reply.body)).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
  });

  it("cannot hide a second, different run header past the 2,000th, nor a late one: nothing is forwarded", async () => {
    const before = fleet.stack.provider.requests.length;
    const conflicting = await send(
      fleet.gateway,
      "POST",
      "/v1/chat/completions",
      [
        `Authorization: Bearer ${API_KEY}`,
        "X-Holdfast-Run: first-run",
        ...FILLER,
        "X-Holdfast-Run: second-run",
      ],
      CHAT,
    );
    expect(conflicting.status).toBe(431);
    const late = await send(
      fleet.gateway,
      "POST",
      "/v1/chat/completions",
      [`Authorization: Bearer ${API_KEY}`, ...FILLER, "X-Holdfast-Run: late-run"],
      CHAT,
    );
    expect(late.status).toBe(431);
    expect(fleet.stack.provider.requests.length).toBe(before);
    for (const runId of ["first-run", "second-run", "late-run"]) {
      expect((await fleet.stack.run(runId)).steps).toEqual([]);
    }
    await fleet.metered("after-hidden-run-header");
  });
});

describe("JSON nested deeper than http.max_json_depth (128)", () => {
  const DEEP = nested(200_000);

  it.each([
    ["/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":${DEEP}}]}`],
    ["/v1/responses", `{"model":"gpt-4o-mini","input":"hi","metadata":${DEEP}}`],
    ["/v1/messages", `{"model":"claude-3-5-haiku-20241022","max_tokens":5,"messages":[],"tools":${DEEP}}`],
  ])(
    "200,000 levels on the gateway's %s: a 400 in the provider's shape, nothing forwarded",
    async (path, body) => {
      const before = fleet.stack.provider.requests.length;
      const reply = await send(
        fleet.gateway,
        "POST",
        path,
        [`Authorization: Bearer ${API_KEY}`, "anthropic-version: 2023-06-01", "X-Holdfast-Run: deep"],
        body,
      );
      expect(reply.status).toBe(400);
      const error = (JSON.parse(reply.body) as { error: { type: string; message: string } }).error;
      expect(error.type).toBe("invalid_request_error");
      expect(error.message).toMatch(/more than 128 levels deep.*\(http\.max_json_depth\)/);
      expect(fleet.stack.provider.requests.length).toBe(before);
      await fleet.metered(`after-deep-${path.replaceAll("/", "-")}`);
    },
  );

  it.each([
    ["projector", () => fleet.projector, "/v1/query", `{"sql":"SELECT 1","x":${DEEP}}`, READ],
    ["scheduler", () => fleet.scheduler, "/v1/agents/research/runs", `{"input":${DEEP}}`, TOKEN],
    // 200,000 levels are past the control API's 64 KiB; 20,000 are not.
    ["control", () => fleet.control, "/holdfast/v1/hold", `{"tag":"t","reason":${nested(20_000)}}`, TOKEN],
  ])("on the %s: a 400 naming the bound", async (name, origin, path, body, token) => {
    const reply = await send(origin(), "POST", path, [`Authorization: Bearer ${token}`], body);
    expect(reply.status).toBe(400);
    expect(errorCode(name, reply.body)).toBe("json_too_deep");
    expect(JSON.parse(reply.body).error.message).toMatch(/more than 128 levels deep/);
    await fleet.metered(`after-deep-${name}`);
  });

  it("in a run's input over gRPC: INVALID_ARGUMENT, and nothing submitted", async () => {
    const grpc = new RunsApi({ scheduler: fleet.schedulerGrpc, token: TOKEN });
    try {
      const deployed = await fetch(`${fleet.scheduler}/v1/agents/deep-input/deployments`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({ version: "1" }),
      });
      expect(deployed.status).toBe(200);
      const error = await grpc.submit("deep-input", JSON.parse(nested(500))).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 3 /* INVALID_ARGUMENT */ });
      expect((error as Error).message).toMatch(/more than 128 levels deep \(http\.max_json_depth\)/);
      expect(await grpc.list({ agent: "deep-input" })).toEqual([]);
    } finally {
      grpc.close();
    }
  });
});

describe("a body over the listener's limit", () => {
  it.each([
    [
      "gateway",
      () => fleet.gateway,
      "/v1/chat/completions",
      `Bearer ${API_KEY}`,
      1_500_000,
      /gateway\.max_body_bytes/,
    ],
    ["control", () => fleet.control, "/holdfast/v1/hold", `Bearer ${TOKEN}`, 70_000, /65536 bytes/],
    ["projector", () => fleet.projector, "/v1/query", `Bearer ${READ}`, 1_100_000, /1048576 bytes/],
    [
      "scheduler",
      () => fleet.scheduler,
      "/v1/agents/research/runs",
      `Bearer ${TOKEN}`,
      2_500_000,
      /2000000 bytes/,
    ],
  ])("is a 413 on the %s, in its shape", async (name, origin, path, authorization, size, limit) => {
    const body = JSON.stringify({ sql: "SELECT 1", input: "x".repeat(size) });
    const reply = await send(origin(), "POST", path, [`Authorization: ${authorization}`], body);
    expect(reply.status).toBe(413);
    expect(errorCode(name, reply.body)).toBe("request_too_large");
    expect(JSON.parse(reply.body).error.message).toMatch(limit);
    await fleet.metered(`after-large-${name}`);
  });
});

describe("the projector's analytics API", () => {
  it("answers SQL and runs only with the read or control token", async () => {
    for (const [method, path, body] of [
      ["POST", "/v1/query", JSON.stringify({ sql: "SELECT count() AS n FROM steps" })],
      ["GET", "/v1/runs", undefined],
    ] as const) {
      const call = (authorization?: string) =>
        fetch(`${fleet.projector}${path}`, {
          method,
          headers: {
            "content-type": "application/json",
            ...(authorization === undefined ? {} : { authorization }),
          },
          ...(body === undefined ? {} : { body }),
        });
      const anonymous = await call();
      expect(anonymous.status).toBe(401);
      expect(((await anonymous.json()) as { error: { code: string } }).error.code).toBe("unauthenticated");
      expect((await call(`Bearer ${API_KEY}`)).status).toBe(401);
      expect((await call(`Bearer ${READ}`)).status).toBe(200);
      expect((await call(`Bearer ${TOKEN}`)).status).toBe(200);
    }
    // Its liveness stays open.
    expect((await fetch(`${fleet.projector}/health`)).status).toBe(200);
  });
});

describe("every gRPC listener", () => {
  it("lets one connection open at most 100 streams at once (health takes no token)", async () => {
    for (const address of [fleet.controlGrpc, fleet.schedulerGrpc, fleet.budgetGrpc]) {
      const session = http2Connect(`http://${address}`);
      try {
        const [settings] = (await once(session, "remoteSettings")) as [{ maxConcurrentStreams?: number }];
        expect(settings.maxConcurrentStreams, address).toBe(100);
      } finally {
        session.destroy();
      }
    }
  });
});

describe("the health of control, the projector and the scheduler", () => {
  it("answers liveness to anyone, and the pid, queues and lease holder only with a token", async () => {
    const routes = [
      [`${fleet.control}/holdfast/v1/health`, ["pid", "nats", "quarantined"]],
      [`${fleet.projector}/health`, ["pid", "lease_holder", "lag_events", "quarantined"]],
      [`${fleet.scheduler}/holdfast/health`, ["pid", "nats", "quarantined"]],
    ] as const;
    for (const [url, details] of routes) {
      const health = async (authorization?: string) => {
        const response = await fetch(url, { headers: authorization === undefined ? {} : { authorization } });
        expect(response.status, url).toBe(200);
        return (await response.json()) as Record<string, unknown>;
      };
      for (const anyone of [undefined, `Bearer ${API_KEY}`, "Bearer not-a-token"]) {
        expect(await health(anyone), `${url} as ${anyone ?? "nobody"}`).toEqual({ status: "ok" });
      }
      for (const token of [READ, TOKEN]) {
        const shown = await health(`Bearer ${token}`);
        expect(shown.status, url).toBe("ok");
        expect(Object.keys(shown), url).toEqual(expect.arrayContaining([...details]));
      }
    }
  });
});

describe("the gateway's health", () => {
  it("answers liveness without a token, and its details only with one", async () => {
    const health = async (authorization?: string) => {
      const response = await fetch(`${fleet.gateway}/holdfast/health`, {
        headers: authorization === undefined ? {} : { authorization },
      });
      expect(response.status).toBe(200);
      return (await response.json()) as Record<string, unknown>;
    };
    expect(await health()).toEqual({ status: "ok" });
    // An agent's SDK sends its provider key: liveness, not a refusal.
    expect(await health(`Bearer ${API_KEY}`)).toEqual({ status: "ok" });
    for (const token of [READ, TOKEN]) {
      expect(await health(`Bearer ${token}`)).toMatchObject({
        status: "ok",
        pid: process.pid,
        nats: "connected",
        runs_held: 0,
        peer_gateways: false,
      });
    }
  });
});
