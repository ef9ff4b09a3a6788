import { type RunningControl, startControl } from "@holdfast/control";
import { isKnown } from "@holdfast/events";
import { createLogger } from "@holdfast/log";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// Rate-limit prediction through the official SDKs (no retries of their own: a 429 would
// reach the test): each API key has a small window at the fake provider, which answers
// with OpenAI's or Anthropic's rate-limit headers and refuses what does not fit with a 429.
// Calls past a key's window wait in place (wait_threshold_s: 2) or checkpoint their run;
// none of them sees a 429, and the provider never has to send one.
let stack: Stack;
let control: RunningControl;
const TOKEN = "control-token-for-predict-tests-01234";
const KEY_WAIT = "sk-wait-00000000000000000000000000";
const KEY_CHECKPOINT = "sk-checkpoint-000000000000000000000";
const KEY_SMALL = "sk-small-0000000000000000000000000";
const KEY_SLIP = "sk-slip-00000000000000000000000000";
const KEY_ANTHROPIC = "sk-ant-0000000000000000000000000000";
const KEY_FLEET = "sk-fleet-0000000000000000000000000";
const KEY_COLD = "sk-cold-00000000000000000000000000";
const KEY_PRIORITY = "sk-priority-000000000000000000000000";

beforeAll(async () => {
  stack = await startStack({
    // The fake's windows refill continuously, and its operator says so: these tests are of
    // what prediction does with a window it knows (window-shapes.e2e.test.ts learns them).
    windowShape: "continuous",
    config: { predict: { wait_threshold_s: 2, max_wait_s: 20 }, hold: { keepalive_ms: 1_000 } },
    provider: {
      limitsByKey: {
        // 500 tokens a second; a call below takes about 506.
        [KEY_WAIT]: { tpm: 30_000 },
        // 50 tokens a second; a call below takes 150: once spent, a call waits 3 s.
        [KEY_CHECKPOINT]: { tpm: 3_000 },
        [KEY_SMALL]: { tpm: 600 },
        // 100 tokens a second.
        [KEY_SLIP]: { tpm: 6_000 },
        // Output tokens: 100 a second; a call below asks for 150 (1.5 s once spent).
        [KEY_ANTHROPIC]: { tpm: 1_000_000, otpm: 6_000 },
        // 300 tokens a second, shared by agents on two gateways; a call below takes 150.
        [KEY_FLEET]: { tpm: 18_000 },
        // 6,000 tokens, refilled in 3 s (2,000 a second): far less than 20 calls of ~550 at once.
        [KEY_COLD]: { tpm: 6_000, windowMs: 3_000 },
        // 6,000 tokens, refilled in 3 s (2,000 a second); a call below takes about 1,350 (more
        // with the margin earlier tests taught), so no slice holds more than the one call
        // (none is spent ahead of the queue).
        [KEY_PRIORITY]: { tpm: 6_000, windowMs: 3_000 },
      },
    },
  });
  control = await startControl(
    {
      ...stack.configFor("control"),
      control: { ...stack.config.control, port: 0, grpc_port: 0, token: TOKEN },
    },
    createLogger({ name: "control", level: "silent" }),
  );
});
afterAll(async () => {
  await control?.close();
  await stack?.close();
});

const chat = (apiKey: string, runId: string) => (content: string, maxTokens: number) =>
  stack.client({ apiKey, headers: { "X-Holdfast-Run": runId } }).chat.completions.create({
    model: "gpt-4o-mini",
    max_tokens: maxTokens,
    messages: [{ role: "user", content }],
  });

/** The provider's answers to one key: how many it refused with a 429, and how many it served. */
function provider(apiKey: string): { refused: number; served: number } {
  const mine = stack.provider.requests.filter((r) => r.apiKey === apiKey);
  return {
    refused: mine.filter((r) => r.status === 429).length,
    served: mine.filter((r) => r.status === 200).length,
  };
}

describe("rate-limit prediction", () => {
  it("a fleet starting at once on a key nothing is read of yet: one call finds out its window, the others wait for its answer", async () => {
    // The provider takes 300 ms to answer: every agent's first call is in before any answer says what the window is.
    const calls = Array.from({ length: 20 }, (_, i) =>
      stack
        .client({
          apiKey: KEY_COLD,
          headers: { "X-Holdfast-Run": `predict-cold-${i}`, "x-fake-latency-ms": "300" },
        })
        .chat.completions.create({
          model: "gpt-4o-mini",
          max_tokens: 44,
          messages: [{ role: "user", content: `${i} ${"c ".repeat(1_000)}` }],
        }),
    );
    const answers = await Promise.all(calls);
    expect(answers.every((a) => a.choices[0]?.message !== undefined)).toBe(true);
    expect(provider(KEY_COLD)).toEqual({ refused: 0, served: 20 });
  }, 30_000);

  it("an agent loop past its key's window waits in place: no 429 reaches it, none is even sent", async () => {
    const call = chat(KEY_WAIT, "predict-wait");
    const started = Date.now();
    for (let i = 0; i < 64; i++) await call(`${i} ${"x".repeat(1_600)}`, 100);
    const elapsed = Date.now() - started;
    expect(provider(KEY_WAIT)).toEqual({ refused: 0, served: 64 });
    // 64 calls of ~506 tokens from a 30,000-token window refilling 500 a second: ~2.4 s of waits.
    expect(elapsed).toBeGreaterThan(1_500);

    const run = await stack.settled("predict-wait", 64);
    const waited = run.steps.filter((s) => s.prediction?.action === "wait");
    expect(waited.length).toBeGreaterThan(0);
    expect(waited[0]?.prediction).toMatchObject({ dimension: "tokens", limit: 30_000 });
    expect(waited[0]!.prediction!.remaining).toBeLessThan(waited[0]!.prediction!.needed);
    expect(waited[0]!.prediction!.waitedMs).toBeGreaterThan(100);
    // Every call went through prediction, its figures on its StepStarted.
    expect(run.steps.every((s) => s.prediction !== null && s.prediction.keyId.length === 16)).toBe(true);
    expect(run.status).not.toBe("held");
  }, 60_000);

  it("a wait longer than the threshold checkpoints the run (held: rate_limit), which resumes by itself", async () => {
    const call = chat(KEY_CHECKPOINT, "predict-checkpoint");
    for (let i = 0; i < 20; i++) await call(`${i} ${"y".repeat(400)}`, 44);
    // The window is spent: the next call needs 3 s of refill, more than the 2 s threshold.
    const started = Date.now();
    const answer = call(`20 ${"y".repeat(400)}`, 44);
    const held = await waitForStatus("predict-checkpoint", "held");
    expect(held.hold?.trip).toMatchObject({ limit: "rate_limit", prediction: { action: "checkpoint" } });
    expect(held.hold!.trip!.prediction!.resumeAtMs).toBeGreaterThan(started);
    expect((await answer).choices[0]?.message).toBeDefined();
    expect(Date.now() - started).toBeGreaterThan(1_500);
    expect(provider(KEY_CHECKPOINT)).toEqual({ refused: 0, served: 21 });

    const run = await stack.settled("predict-checkpoint", 21);
    const tripped = run.control.find((c) => c.what === "tripped");
    const resumed = run.control.find((c) => c.what === "resumed");
    expect(tripped).toMatchObject({ actor: "predictor", trip: { limit: "rate_limit" } });
    expect(resumed?.actor).toMatch(/^predictor/);
    expect(run.status).not.toBe("held");
    // The checkpoint's resume keeps the run's window of limits: no new window was started.
    expect(run.window.startedMs).toBe(run.firstSeenMs);
  }, 60_000);

  it("a call its window cannot fit within max_wait_s gets the provider's own 429 and retry-after, at once", async () => {
    const call = chat(KEY_SMALL, "predict-ceiling");
    await call("z".repeat(800), 94);
    await call("z".repeat(800), 94).catch(() => undefined);
    const before = provider(KEY_SMALL).served;
    const started = Date.now();
    const error = (await call("z".repeat(800), 94).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.APIError
    >;
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect(Number(error.headers?.get("retry-after"))).toBeGreaterThanOrEqual(20);
    expect(Date.now() - started).toBeLessThan(1_500);
    expect(provider(KEY_SMALL)).toEqual({ refused: 0, served: before });
  });

  it("a call larger than its key's whole window is refused at once with a clear error, never parked", async () => {
    const error = (await chat(KEY_SMALL, "predict-large")("w".repeat(4_000), 50).catch(
      (e: unknown) => e,
    )) as InstanceType<typeof OpenAI.APIError>;
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(error.code).toBe("request_too_large_for_rate_limit");
    expect(error.message).toMatch(/holds 600 in all/);
    expect(provider(KEY_SMALL).refused).toBe(0);
  });

  it("a 429 that slips through (another client spent the key) is retried inside the gateway; the agent never sees it", async () => {
    const call = chat(KEY_SLIP, "predict-slip");
    await call("v".repeat(1_600), 100);
    // Someone outside Holdfast spends the key's window directly at the provider, leaving ~410 of the ~506 the next call takes.
    const outside = (maxTokens: number) =>
      fetch(`${stack.provider.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${KEY_SLIP}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: "gpt-4o-mini",
          max_tokens: maxTokens,
          messages: [{ role: "user", content: "hi" }],
        }),
      });
    const left = Number((await outside(1)).headers.get("x-ratelimit-remaining-tokens"));
    expect((await outside(left - 420)).status).toBe(200);
    const answer = await call("v".repeat(1_600), 100);
    expect(answer.choices[0]?.message).toBeDefined();
    expect(provider(KEY_SLIP)).toMatchObject({ refused: 1 });

    const run = await stack.settled("predict-slip", 2);
    expect(run.steps[1]?.status).toBe("completed");
    expect(run.steps[1]?.retries).toEqual([
      expect.objectContaining({ attempt: 2, upstreamStatus: 429, wastedInputTokens: expect.any(Number) }),
    ]);
    expect(run.steps[1]!.retries[0]!.retryAfterMs).toBeGreaterThan(0);
    expect(run.totals).toMatchObject({ retries: 1 });
    expect(run.totals.wastedInputTokens).toBeGreaterThan(300);
  });

  it("Anthropic Messages: the output-token window is read apart, and its calls wait for it", async () => {
    const client = stack.anthropic({
      apiKey: KEY_ANTHROPIC,
      headers: { "X-Holdfast-Run": "predict-anthropic" },
    });
    const started = Date.now();
    for (let i = 0; i < 42; i++) {
      await client.messages.create({
        model: "claude-haiku-4-5",
        max_tokens: 150,
        messages: [{ role: "user", content: `${i}` }],
      });
    }
    expect(provider(KEY_ANTHROPIC)).toEqual({ refused: 0, served: 42 });
    expect(Date.now() - started).toBeGreaterThan(1_000);
    const run = await stack.settled("predict-anthropic", 42);
    const waited = run.steps.filter((s) => s.prediction?.action === "wait");
    expect(waited.length).toBeGreaterThan(0);
    expect(waited[0]?.prediction).toMatchObject({ dimension: "output_tokens", limit: 6_000 });
  }, 60_000);

  it("agents on two gateways sharing one key take room from one window (the budget service's): no 429 is even sent", async () => {
    const other = await stack.extraGateway({});
    const agent = async (client: OpenAI, runId: string) => {
      for (let i = 0; i < 64; i++) {
        await client.chat.completions.create({
          model: "gpt-4o-mini",
          max_tokens: 44,
          messages: [{ role: "user", content: `${i} ${"f".repeat(400)}` }],
        });
      }
      return runId;
    };
    const here = new OpenAI({
      apiKey: KEY_FLEET,
      baseURL: stack.gatewayUrl,
      maxRetries: 0,
      defaultHeaders: { "X-Holdfast-Run": "fleet-a" },
    });
    const there = new OpenAI({
      apiKey: KEY_FLEET,
      baseURL: other.baseUrl,
      maxRetries: 0,
      defaultHeaders: { "X-Holdfast-Run": "fleet-b" },
    });
    await Promise.all([agent(here, "fleet-a"), agent(there, "fleet-b")]);
    const { refused, served } = provider(KEY_FLEET);
    expect(served).toBe(128);
    // Both gateways waited for the one window: 128 calls of 150 tokens from 18,000 refilling 300 a second.
    const runs = [await stack.settled("fleet-a", 64), await stack.settled("fleet-b", 64)];
    for (const run of runs) expect(run.steps.some((s) => s.prediction?.action === "wait")).toBe(true);
    // One account for both gateways: neither spends what the other was granted.
    expect(refused).toBe(0);
    expect(runs.every((run) => run.totals.retries === 0)).toBe(true);
  }, 60_000);

  it("calls waiting for one window on two gateways are served by priority (X-Holdfast-Priority), then by how long they waited", async () => {
    const other = await stack.extraGateway({});
    const ask = (baseURL: string, runId: string, priority?: number) =>
      new OpenAI({
        apiKey: KEY_PRIORITY,
        baseURL,
        maxRetries: 0,
        defaultHeaders: {
          "X-Holdfast-Run": runId,
          ...(priority === undefined ? {} : { "X-Holdfast-Priority": String(priority) }),
        },
      }).chat.completions.create({
        model: "gpt-4o-mini",
        max_tokens: 44,
        messages: [{ role: "user", content: `${runId} ${"p ".repeat(2_600)}` }],
      });
    // Spend the window, one call at a time (the window is read from each answer).
    for (let i = 0; i < 5; i++) await ask(stack.gatewayUrl, `priority-spend-${i}`);
    // Two calls wait their turn on this gateway; then an urgent one arrives on the other.
    const low = [ask(stack.gatewayUrl, "priority-low-1"), ask(stack.gatewayUrl, "priority-low-2")];
    await new Promise((resolve) => setTimeout(resolve, 100));
    const high = ask(other.baseUrl, "priority-high", 500);
    await Promise.all([...low, high]);
    const order = stack.provider.requests
      .filter((r) => r.apiKey === KEY_PRIORITY && r.status === 200)
      .map((r) => String((r.body as { messages: { content: string }[] }).messages[0]?.content.split(" ")[0]))
      .slice(5);
    expect(order[0]).toBe("priority-high");
    expect(order.slice(1).sort()).toEqual(["priority-low-1", "priority-low-2"]);
    expect(provider(KEY_PRIORITY).refused).toBe(0);
  }, 30_000);

  it("refuses a priority out of range with a clear error in the API's shape", async () => {
    const error = await new OpenAI({
      apiKey: KEY_PRIORITY,
      baseURL: stack.gatewayUrl,
      maxRetries: 0,
      defaultHeaders: { "X-Holdfast-Priority": "5000" },
    }).chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(/X-Holdfast-Priority/);
  });

  it("each key's window is an event on the key's own subject, and `holdfast windows` lists it; the key is nowhere", async () => {
    const readings = await stack.bus.lastOnSubjects([stack.bus.subjects.ofKeyType("RateLimitObserved")]);
    const observed = readings.flatMap(({ envelope }) =>
      isKnown(envelope) && envelope.payload.$case === "rateLimitObserved" ? [envelope.payload.value] : [],
    );
    expect(observed.length).toBeGreaterThanOrEqual(5);
    const wait = observed.find((o) => o.tokens?.limit === 30_000);
    expect(wait).toMatchObject({ upstream: new URL(stack.provider.url).origin, tokens: { reported: true } });
    expect(wait?.keyId).toMatch(/^[0-9a-f]{16}$/);
    const raw = JSON.stringify(readings, (_k, v) => (typeof v === "bigint" ? String(v) : v));
    for (const key of [KEY_WAIT, KEY_CHECKPOINT, KEY_SMALL, KEY_SLIP, KEY_ANTHROPIC])
      expect(raw).not.toContain(key);

    const response = await fetch(`${control.url}/windows`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(response.status).toBe(200);
    const { windows } = (await response.json()) as {
      windows: {
        key_id: string;
        dimensions: { dimension: string; limit: number; remaining_now: number }[];
      }[];
    };
    const listed = windows.find((w) => w.key_id === wait?.keyId);
    const tokens = listed?.dimensions.find((d) => d.dimension === "tokens");
    expect(tokens?.limit).toBe(30_000);
    // Refilled since it was read: at most the whole window, at least what was read.
    expect(tokens!.remaining_now).toBeLessThanOrEqual(30_000);
    expect(tokens!.remaining_now).toBeGreaterThanOrEqual(Number(wait!.tokens!.remaining));
    expect(
      windows.find((w) => w.dimensions.some((d) => d.dimension === "output_tokens" && d.limit === 6_000)),
    ).toBeDefined();
  });
});

async function waitForStatus(runId: string, status: string) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const run = await stack.run(runId);
    if (run.status === status) return run;
    if (Date.now() > deadline) throw new Error(`run ${runId} never became ${status} (it is ${run.status})`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
