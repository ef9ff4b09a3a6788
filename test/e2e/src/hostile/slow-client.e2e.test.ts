import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, stillPending } from "../stack.js";
import { type Fleet, startFleet } from "./fleet.js";
import { rawExchange, requestBytes } from "./wire.js";

// The hostile-peer suite: slow clients. A client that sends part of a body, or trickles
// its headers, holds a connection (and a file descriptor) for as long as the server lets
// it; thousands of them hold thousands. Every listener cuts such a client off after
// http.header_timeout_ms / http.request_timeout_ms with a 408 in its own error shape, and
// closes an idle kept-alive connection after http.idle_timeout_ms. Only receiving is
// timed: a held call and a long stream are answered for as long as they take. After each
// attack a model call through the gateway is still metered.
const TOKEN = "control-token-for-slow-clients-0";
const LIMITS = { header_timeout_ms: 500, request_timeout_ms: 1_000, idle_timeout_ms: 1_000 };

let fleet: Fleet;
beforeAll(async () => {
  fleet = await startFleet({
    http: LIMITS,
    control: { token: TOKEN },
    // A held call is silent: nothing is written to it that could pass for activity.
    hold: { keepalive_1xx: false, keepalive_ms: 600_000 },
  });
});
afterAll(async () => {
  await fleet?.close();
});

/** A request whose body stops at 10 of its announced 1,000 bytes. */
const partialBody = (origin: string, path: string, headers: string[] = [], key = API_KEY) =>
  rawExchange(
    origin,
    requestBytes(
      origin,
      "POST",
      path,
      [`Authorization: Bearer ${key}`, "Content-Type: application/json", "Content-Length: 1000", ...headers],
      '{"model":1',
    ),
  );

/** A request line, then one more header line every 100 ms, never the blank line. */
const trickledHeaders = (origin: string, path: string) =>
  rawExchange(origin, `POST ${path} HTTP/1.1\r\nHost: x\r\n`, {
    trickle: () => "X-Slow: 1\r\n",
    everyMs: 100,
  });

const TIMEOUT =
  /not received in time.*500 ms \(http\.header_timeout_ms\).*1000 ms \(http\.request_timeout_ms\)/;

describe("a partial body is cut off with a 408 in the listener's own shape", () => {
  it("on the gateway, in OpenAI's shape for OpenAI's routes and Anthropic's for Anthropic's", async () => {
    const before = fleet.stack.provider.requests.length;
    const chat = await partialBody(fleet.gateway, "/v1/chat/completions", ["X-Holdfast-Run: slow-chat"]);
    expect(chat).toMatchObject({ closedByServer: true, status: 408 });
    expect(JSON.parse(chat.body)).toEqual({
      error: {
        message: expect.stringMatching(TIMEOUT),
        type: "invalid_request_error",
        param: null,
        code: "request_timeout",
      },
    });
    const messages = await partialBody(fleet.gateway, "/v1/messages", ["anthropic-version: 2023-06-01"]);
    expect(messages).toMatchObject({ closedByServer: true, status: 408 });
    expect(JSON.parse(messages.body)).toMatchObject({
      type: "error",
      error: { type: "invalid_request_error", message: expect.stringMatching(TIMEOUT) },
    });
    // Nothing was forwarded or recorded for them.
    expect(fleet.stack.provider.requests.length).toBe(before);
    expect((await fleet.stack.run("slow-chat")).steps).toEqual([]);
    await fleet.metered("after-slow-bodies");
  });

  it("on twenty connections at once: each is cut, none is kept", async () => {
    const replies = await Promise.all(
      Array.from({ length: 20 }, () => partialBody(fleet.gateway, "/v1/chat/completions")),
    );
    expect(replies.map((r) => [r.closedByServer, r.status])).toEqual(replies.map(() => [true, 408]));
    await fleet.metered("after-many-slow-bodies");
  });

  it.each([
    ["control", () => fleet.control, "/holdfast/v1/hold"],
    ["projector", () => fleet.projector, "/v1/query"],
    ["scheduler", () => fleet.scheduler, "/v1/agents/research/runs"],
  ])("on the %s's API, in its {error: {code, message}}", async (_name, origin, path) => {
    // With the token: a caller without one is refused before its body is read.
    const reply = await partialBody(origin(), path, [], TOKEN);
    expect(reply).toMatchObject({ closedByServer: true, status: 408 });
    expect(JSON.parse(reply.body)).toEqual({
      error: { code: "request_timeout", message: expect.stringMatching(TIMEOUT) },
    });
    await fleet.metered(`after-slow-body-${_name}`);
  });
});

describe("a slow client refused before its body is read", () => {
  it.each([
    ["control", () => fleet.control, "/holdfast/v1/hold"],
    ["projector", () => fleet.projector, "/v1/query"],
  ])("gets one answer from the %s, and its connection closed", async (_name, origin, path) => {
    const reply = await partialBody(origin(), path, [], "not-the-token");
    expect(reply).toMatchObject({ closedByServer: true, status: 401 });
    // One response, not a second (a 408) once the rest of the body fails to come.
    expect(JSON.parse(reply.body)).toEqual({
      error: { code: "unauthenticated", message: expect.any(String) },
    });
  });
});

describe("trickled headers are cut off with a 408", () => {
  it.each([
    ["gateway", () => fleet.gateway, "/v1/chat/completions"],
    ["control", () => fleet.control, "/holdfast/v1/hold"],
    ["projector", () => fleet.projector, "/v1/query"],
    ["scheduler", () => fleet.scheduler, "/v1/agents/research/runs"],
  ])("on the %s", async (name, origin, path) => {
    const reply = await trickledHeaders(origin(), path);
    expect(reply).toMatchObject({ closedByServer: true, status: 408 });
    // The path was not read: an error in the gateway's default (OpenAI's) shape, or the API's own.
    expect(JSON.parse(reply.body).error).toMatchObject({
      code: "request_timeout",
      message: expect.stringMatching(TIMEOUT),
    });
    await fleet.metered(`after-trickled-headers-${name}`);
  });
});

describe("idle connections", () => {
  it("one that never sends a request is closed after http.header_timeout_ms", async () => {
    const reply = await rawExchange(fleet.gateway, "");
    expect(reply.closedByServer).toBe(true);
  });

  it("a kept-alive one is closed once idle for http.idle_timeout_ms, after its answer", async () => {
    const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "and then?" }] });
    const reply = await rawExchange(
      fleet.gateway,
      requestBytes(
        fleet.gateway,
        "POST",
        "/v1/chat/completions",
        [
          `Authorization: Bearer ${API_KEY}`,
          "Content-Type: application/json",
          `Content-Length: ${Buffer.byteLength(body)}`,
          "X-Holdfast-Run: kept-alive",
        ],
        body,
      ),
    );
    expect(reply).toMatchObject({ closedByServer: true, status: 200 });
    expect((await fleet.stack.settled("kept-alive", 1)).completed).toBe(1);
  });
});

describe("only receiving is timed", () => {
  it("a call held by an operator for longer than every timeout is answered when resumed, and metered", async () => {
    const control = (path: string) =>
      fetch(`${fleet.control}/holdfast/v1/runs/held-long/${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({ reason: "slow-client suite" }),
      });
    expect((await control("hold")).status).toBe(200);
    const call = fleet.stack.client({ headers: { "X-Holdfast-Run": "held-long" } }).chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "wait for me" }],
    });
    // Parked, silent, past http.request_timeout_ms and http.idle_timeout_ms together.
    expect(await stillPending(call, 2_500)).toBe(true);
    expect((await control("resume")).status).toBe(200);
    expect((await call).choices[0]?.message.content).toBe("Fake reply to: wait for me");
    expect((await fleet.stack.settled("held-long", 1)).completed).toBe(1);
  });

  it("a provider slower than every timeout, and a stream longer than them, are delivered whole", async () => {
    const slow = await fleet.stack
      .client({ headers: { "X-Holdfast-Run": "slow-provider", "x-fake-latency-ms": "2500" } })
      .chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "take your time" }],
      });
    expect(slow.choices[0]?.message.content).toBe("Fake reply to: take your time");
    const stream = await fleet.stack
      .client({ headers: { "X-Holdfast-Run": "long-stream", "x-fake-chunk-delay-ms": "250" } })
      .chat.completions.create({
        model: "gpt-4o-mini",
        stream: true,
        messages: [{ role: "user", content: "one two three four five six seven eight nine ten" }],
      });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe("Fake reply to: one two three four five six seven eight nine ten");
    expect((await fleet.stack.settled("slow-provider", 1)).completed).toBe(1);
    expect((await fleet.stack.settled("long-stream", 1)).completed).toBe(1);
  });
});
