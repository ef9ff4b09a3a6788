import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { type FakeProvider, startFakeProvider } from "@holdfast/fake-provider";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// Routing through the official SDK (no retries of its own: a 429 or 5xx would reach the
// test). The route targets are a second fake provider (two keys with small windows, read
// from the environment as key_env says), a provider that is down (503), one that refuses
// everything with a 429, and a port nobody listens on.
const KEY_A = "sk-route-a-000000000000000000000000";
const KEY_B = "sk-route-b-000000000000000000000000";
const CALLER = "sk-caller-0000000000000000000000000";

let stack: Stack;
let upstream: FakeProvider;
let down: Refuser;
let busy: Refuser;

interface Refuser {
  server: Server;
  url: string;
  /** Requests it refused so far. */
  count(): number;
}

/** A provider that answers every call with one status, in OpenAI's error shape. */
async function refuser(status: number, headers: Record<string, string> = {}): Promise<Refuser> {
  let count = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      count += 1;
      res.writeHead(status, { "content-type": "application/json", ...headers });
      res.end(
        JSON.stringify({ error: { message: `refused with ${status}`, type: "server_error", code: null } }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}/v1`, count: () => count };
}

beforeAll(async () => {
  process.env.HOLDFAST_TEST_ROUTE_KEY_A = KEY_A;
  process.env.HOLDFAST_TEST_ROUTE_KEY_B = KEY_B;
  // 50 tokens a second each; a call below takes about 150.
  upstream = await startFakeProvider({ limitsByKey: { [KEY_A]: { tpm: 3_000 }, [KEY_B]: { tpm: 3_000 } } });
  down = await refuser(503);
  busy = await refuser(429, { "retry-after": "30" });
  const fake = `${upstream.url}/v1`;
  stack = await startStack({
    config: {
      predict: { wait_threshold_s: 2, max_wait_s: 20 },
      routing: { breaker_failures: 2, breaker_open_s: 1 },
      routes: {
        fast: {
          targets: [
            { upstream: fake, model: "gpt-4o-mini", key_env: "HOLDFAST_TEST_ROUTE_KEY_A" },
            { upstream: fake, model: "gpt-4o", key_env: "HOLDFAST_TEST_ROUTE_KEY_B" },
          ],
        },
        "claude-fast": {
          targets: [
            { upstream: fake, model: "claude-3-5-haiku-latest", key_env: "HOLDFAST_TEST_ROUTE_KEY_B" },
          ],
        },
        flaky: {
          targets: [
            { upstream: down.url, model: "gpt-4o-mini" },
            { upstream: fake, model: "gpt-4o-mini" },
          ],
          expose_model: true,
        },
        busy: {
          targets: [
            { upstream: busy.url, model: "gpt-4o-mini" },
            { upstream: fake, model: "gpt-4o-mini" },
          ],
        },
        gone: {
          targets: [
            { upstream: "http://127.0.0.1:9/v1", model: "gpt-4o-mini" },
            { upstream: fake, model: "gpt-4o-mini" },
          ],
        },
      },
    },
  });
});
afterAll(async () => {
  await stack?.close();
  await upstream?.close();
  down?.server.close();
  busy?.server.close();
});

const client = (runId: string) => stack.client({ apiKey: CALLER, headers: { "X-Holdfast-Run": runId } });
const ask = (runId: string, model: string, i: number) =>
  client(runId).chat.completions.create({
    model,
    max_tokens: 44,
    messages: [{ role: "user", content: `${i} ${"r".repeat(400)}` }],
  });

describe("routing a model alias to several upstreams", () => {
  it("goes where the window has headroom: two small keys carry what one could not, no call waits, no 429 is sent", async () => {
    const answers = [];
    // 30 calls of ~150 tokens: 4,500, more than one key's 3,000-token window, less than both.
    for (let i = 0; i < 30; i++) answers.push(await ask("route-headroom", "fast", i));
    // The agent sees the model it asked for.
    expect(answers.every((a) => a.model === "fast")).toBe(true);
    const sent = upstream.requests.filter((r) => r.apiKey === KEY_A || r.apiKey === KEY_B);
    expect(sent.filter((r) => r.status === 429)).toHaveLength(0);
    const byKey = { a: sent.filter((r) => r.apiKey === KEY_A), b: sent.filter((r) => r.apiKey === KEY_B) };
    expect(byKey.a.length).toBeGreaterThan(5);
    expect(byKey.b.length).toBeGreaterThan(5);
    expect(byKey.a.length + byKey.b.length).toBe(30);
    // Each target was asked for its own model, with its own key; the caller's key never left.
    expect(byKey.a.every((r) => (r.body as { model: string }).model === "gpt-4o-mini")).toBe(true);
    expect(byKey.b.every((r) => (r.body as { model: string }).model === "gpt-4o")).toBe(true);
    expect(upstream.requests.some((r) => r.apiKey === CALLER)).toBe(false);

    const run = await stack.settled("route-headroom", 30);
    expect(run.steps.every((s) => s.prediction?.action === "continue")).toBe(true);
    expect(run.steps.every((s) => s.route?.alias === "fast" && s.route.reason === "headroom")).toBe(true);
    // The choice's figures: each target's standing and headroom.
    const later = run.steps.at(-1)!.route!;
    expect(later.candidates.map((c) => c.standing)).toEqual(["ready", "ready"]);
    expect(later.candidates[later.target]!.headroom).toBeGreaterThanOrEqual(
      later.candidates[1 - later.target]!.headroom,
    );
    // The outcome records the model that served it; the route targets' keys are nowhere in the log.
    expect(new Set(run.steps.map((s) => s.model.replace(/-\d{4}-\d{2}-\d{2}$/, "")))).toEqual(
      new Set(["gpt-4o-mini", "gpt-4o"]),
    );
    const events = JSON.stringify((await stack.bus.readRun("route-headroom")).events.map((e) => e.envelope));
    expect(events).not.toContain(KEY_A);
    expect(stack.logs()).not.toContain(KEY_B);
  }, 60_000);

  it("names the alias in a stream's chunks too", async () => {
    const stream = await client("route-stream").chat.completions.create({
      model: "fast",
      max_tokens: 20,
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "stream me" }],
    });
    const models = new Set<string>();
    for await (const chunk of stream) models.add(chunk.model);
    expect([...models]).toEqual(["fast"]);
    const run = await stack.settled("route-stream", 1);
    expect(run.steps[0]?.outputTokens).toBeGreaterThan(0);
  });

  it("falls back in order when a target answers 5xx, opens its breaker, and probes it again after breaker_open_s", async () => {
    const first = await ask("route-breaker", "flaky", 1);
    // expose_model: the answer names the model that served it.
    expect(first.model).toMatch(/^gpt-4o-mini/);
    await ask("route-breaker", "flaky", 2);
    expect(down.count()).toBe(2);
    // Two failures in a row (breaker_failures: 2): the breaker is open, the down target not asked.
    await ask("route-breaker", "flaky", 3);
    expect(down.count()).toBe(2);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    // Half-open: one call probes it, fails, and falls back; the breaker opens again.
    await ask("route-breaker", "flaky", 4);
    expect(down.count()).toBe(3);
    await ask("route-breaker", "flaky", 5);
    expect(down.count()).toBe(3);

    const run = await stack.settled("route-breaker", 5);
    expect(run.steps.map((s) => s.status)).toEqual([
      "completed",
      "completed",
      "completed",
      "completed",
      "completed",
    ]);
    expect(run.steps[0]?.route).toMatchObject({ target: 0, reason: "headroom" });
    expect(run.steps[0]?.retries).toEqual([
      expect.objectContaining({
        attempt: 2,
        upstreamStatus: 503,
        route: expect.objectContaining({ target: 1, reason: "fallback" }),
      }),
    ]);
    expect(run.steps[2]?.route?.target).toBe(1);
    expect(run.steps[2]?.route?.candidates[0]?.standing).toBe("open");
    expect(run.steps[3]?.route).toMatchObject({ target: 0, reason: "probe" });
    expect(run.steps[4]?.route?.candidates[0]?.standing).toBe("open");
  }, 30_000);

  it("a target that answers 429 hands the call to the next at once and cools down until its retry-after", async () => {
    const answer = await ask("route-429", "busy", 1);
    expect(answer.choices[0]?.message).toBeDefined();
    await ask("route-429", "busy", 2);
    expect(busy.count()).toBe(1);
    const run = await stack.settled("route-429", 2);
    expect(run.steps[0]?.retries[0]).toMatchObject({
      upstreamStatus: 429,
      route: { target: 1, reason: "fallback" },
    });
    const cooling = run.steps[1]!.route!.candidates[0]!;
    expect(cooling.standing).toBe("cooling");
    expect(cooling.untilMs).toBeGreaterThan(run.steps[0]!.startedMs + 25_000);
  });

  it("a target nobody answers at is passed over within the same call", async () => {
    const answer = await ask("route-gone", "gone", 1);
    expect(answer.choices[0]?.message).toBeDefined();
    const run = await stack.settled("route-gone", 1);
    expect(run.steps[0]?.retries[0]).toMatchObject({ upstreamStatus: 0, route: { target: 1 } });
  });

  it("routes Anthropic Messages too: the target's key goes as x-api-key, the answer names the alias", async () => {
    const message = await stack
      .anthropic({ apiKey: CALLER, headers: { "X-Holdfast-Run": "route-anthropic" } })
      .messages.create({
        model: "claude-fast",
        max_tokens: 30,
        messages: [{ role: "user", content: "hello" }],
      });
    expect(message.model).toBe("claude-fast");
    const sent = upstream.requests.filter((r) => r.path.endsWith("/messages"));
    expect(sent.map((r) => [r.apiKey, (r.body as { model: string }).model])).toEqual([
      [KEY_B, "claude-3-5-haiku-latest"],
    ]);
    expect(sent[0]?.headers["x-api-key"]).toBe(KEY_B);
    const run = await stack.settled("route-anthropic", 1);
    expect(run.steps[0]).toMatchObject({ model: "claude-3-5-haiku-latest", route: { alias: "claude-fast" } });
    expect(run.steps[0]?.outputTokens).toBeGreaterThan(0);
  });

  it("a model that is no alias goes where it always did, with the caller's key", async () => {
    await ask("route-none", "gpt-4o-mini", 1);
    const run = await stack.settled("route-none", 1);
    expect(run.steps[0]?.route).toBeNull();
    expect(stack.provider.requests.some((r) => r.apiKey === CALLER)).toBe(true);
  });
});
