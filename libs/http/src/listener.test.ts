import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { limitErrorOf } from "./errors.js";
import { clientErrorAnswer, guardListener, type HttpLimitsConfig, listenerOptions } from "./listener.js";

// The limits on a listener as an API built on them answers them (app.inject: the wire's
// timeouts are tested over real sockets in test/e2e/src/hostile).
const LIMITS: HttpLimitsConfig = {
  header_timeout_ms: 1_000,
  request_timeout_ms: 2_000,
  idle_timeout_ms: 3_000,
  max_headers: 20,
  max_json_depth: 8,
};

let app: FastifyInstance;
beforeAll(async () => {
  app = Fastify(listenerOptions(LIMITS, { bodyLimit: 1_024, errorBody: (answer) => ({ error: answer }) }));
  guardListener(app, LIMITS, { json: true });
  app.setErrorHandler((error, _request, reply) => {
    const limit = limitErrorOf(error, 1_024);
    if (limit !== undefined) {
      return reply.code(limit.status).send({ error: { code: limit.code, message: limit.message } });
    }
    const status = (error as { statusCode?: number }).statusCode ?? 500;
    return reply.code(status).send({ error: { code: "other", message: (error as Error).message } });
  });
  app.post("/echo", async (request) => ({ body: request.body }));
  await app.ready();
});
afterAll(async () => {
  await app.close();
});

const headers = (count: number) =>
  Object.fromEntries(Array.from({ length: count }, (_, i) => [`x-h-${i}`, "v"]));

describe("a listener's limits", () => {
  it("gives Node its timeouts, and keeps no socket idle timeout (held answers go on)", () => {
    expect(app.server.headersTimeout).toBe(1_000);
    expect(app.server.requestTimeout).toBe(2_000);
    expect(app.server.keepAliveTimeout).toBe(3_000);
    expect(app.server.timeout).toBe(0);
  });

  it("answers more header fields than http.max_headers with a 431, and takes as many", async () => {
    // inject adds host, user-agent and content-type/length of its own.
    const over = await app.inject({ method: "POST", url: "/echo", payload: {}, headers: headers(20) });
    expect(over.statusCode).toBe(431);
    expect(over.json()).toEqual({
      error: { code: "too_many_headers", message: expect.stringMatching(/more than 20 header fields/) },
    });
    const within = await app.inject({ method: "POST", url: "/echo", payload: {}, headers: headers(15) });
    expect(within.statusCode).toBe(200);
  });

  it("answers a JSON body nested past http.max_json_depth with a 400 naming the bound, and takes one at it", async () => {
    const nest = (levels: number) => "[".repeat(levels) + "]".repeat(levels);
    const deep = await app.inject({
      method: "POST",
      url: "/echo",
      payload: `{"a":${nest(8)}}`,
      headers: { "content-type": "application/json" },
    });
    expect(deep.statusCode).toBe(400);
    expect(deep.json().error).toMatchObject({
      code: "json_too_deep",
      message: expect.stringMatching(/8 levels/),
    });
    const at = await app.inject({
      method: "POST",
      url: "/echo",
      payload: `{"a":${nest(7)}}`,
      headers: { "content-type": "application/json; charset=utf-8" },
    });
    expect(at.statusCode).toBe(200);
    expect(at.json()).toEqual({ body: { a: JSON.parse(nest(7)) } });
  });

  it("still refuses what fastify's own JSON parser refuses", async () => {
    const poisoned = await app.inject({
      method: "POST",
      url: "/echo",
      payload: '{"__proto__": {"admin": true}}',
      headers: { "content-type": "application/json" },
    });
    expect(poisoned.statusCode).toBe(400);
    const broken = await app.inject({
      method: "POST",
      url: "/echo",
      payload: "{not json",
      headers: { "content-type": "application/json" },
    });
    expect(broken.statusCode).toBe(400);
  });

  it("answers a body over its limit with a 413 naming the limit", async () => {
    const big = await app.inject({ method: "POST", url: "/echo", payload: { pad: "x".repeat(2_000) } });
    expect(big.statusCode).toBe(413);
    expect(big.json().error).toEqual({
      code: "request_too_large",
      message: "The request body is larger than 1024 bytes, the most this server accepts.",
    });
  });

  it("says why Node's parser refused a request", () => {
    expect(
      clientErrorAnswer(Object.assign(new Error("t"), { code: "ERR_HTTP_REQUEST_TIMEOUT" }), LIMITS),
    ).toMatchObject({
      status: 408,
      code: "request_timeout",
      message: expect.stringMatching(
        /1000 ms \(http.header_timeout_ms\).*2000 ms \(http.request_timeout_ms\)/,
      ),
    });
    expect(
      clientErrorAnswer(Object.assign(new Error("o"), { code: "HPE_HEADER_OVERFLOW" }), LIMITS).status,
    ).toBe(431);
    expect(
      clientErrorAnswer(
        Object.assign(new Error("Invalid header"), { code: "HPE_INVALID_HEADER_TOKEN" }),
        LIMITS,
      ),
    ).toMatchObject({
      status: 400,
      code: "invalid_http",
    });
  });
});
