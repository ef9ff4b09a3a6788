import Anthropic from "@anthropic-ai/sdk";
import { callDirective } from "@holdfast/fake-provider";
import { createPricer } from "@holdfast/providers";
import { waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "./stack.js";

// Anthropic Messages through the gateway, as the official SDK calls it.
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ provider: { chunkDelayMs: 1 } });
});
afterAll(async () => {
  await stack?.close();
});

const MODEL = "claude-3-5-haiku-20241022";
const WEATHER = {
  name: "get_weather",
  description: "Weather for a city",
  input_schema: { type: "object" as const, properties: { city: { type: "string" } }, required: ["city"] },
};

describe("Anthropic Messages through the gateway with @anthropic-ai/sdk", () => {
  it("answers as the provider does and records the call with usage and cost", async () => {
    const client = stack.anthropic({ headers: { "X-Holdfast-Run": "messages-plain" } });
    const { data, response } = await client.messages
      .create({ model: MODEL, max_tokens: 256, messages: [{ role: "user", content: "Say hello" }] })
      .withResponse();
    expect(data.content[0]).toMatchObject({ type: "text", text: "Fake reply to: Say hello" });
    expect(response.headers.get("anthropic-ratelimit-requests-remaining")).not.toBeNull();
    // The provider got the SDK's own headers: its key and anthropic-version.
    const sent = stack.provider.requests.at(-1)!;
    expect(sent.path).toBe("/v1/messages");
    expect(sent.headers["anthropic-version"]).toBeDefined();
    expect(sent.headers.authorization ?? sent.headers["x-api-key"]).toContain(API_KEY);

    const run = await stack.settled("messages-plain", 1);
    expect(run.steps[0]).toMatchObject({
      status: "completed",
      api: "anthropic_messages",
      model: MODEL,
      upstreamStatus: 200,
      inputTokens: data.usage.input_tokens,
      outputTokens: data.usage.output_tokens,
      usageReported: true,
      finishReason: "end_turn",
      responseId: data.id,
    });
    const expected = createPricer().price({
      model: MODEL,
      usage: {
        reported: true,
        inputTokens: data.usage.input_tokens,
        outputTokens: data.usage.output_tokens,
        cachedInputTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
      },
    });
    expect(expected.known).toBe(true);
    expect(run.steps[0]?.costNanoUsd).toBe(expected.nanoUsd);
  });

  it("streams every event unchanged and meters message_start and message_delta's usage", async () => {
    const client = stack.anthropic({ headers: { "X-Holdfast-Run": "messages-stream" } });
    const stream = client.messages.stream({
      model: MODEL,
      max_tokens: 256,
      messages: [{ role: "user", content: "Tell me about lighthouses" }],
    });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    const final = await stream.finalMessage();
    expect(types[0]).toBe("message_start");
    expect(types.at(-1)).toBe("message_stop");

    const run = await stack.settled("messages-stream", 1);
    expect(run.steps[0]).toMatchObject({
      status: "completed",
      stream: true,
      inputTokens: final.usage.input_tokens,
      outputTokens: final.usage.output_tokens,
      responseId: final.id,
      finishReason: "end_turn",
    });
  });

  it("counts cache writes and reads into the input, and prices each at its own rate", async () => {
    const client = stack.anthropic({ headers: { "X-Holdfast-Run": "messages-cache" } });
    const system = [
      {
        type: "text" as const,
        text: "You are a careful agent. ".repeat(60),
        cache_control: { type: "ephemeral" as const },
      },
    ];
    const ask = {
      model: MODEL,
      max_tokens: 128,
      system,
      messages: [{ role: "user" as const, content: "First question" }],
    };
    const first = await client.messages.create(ask);
    const second = await client.messages.create(ask);
    expect(first.usage.cache_creation_input_tokens).toBeGreaterThan(0);
    expect(second.usage.cache_read_input_tokens).toBeGreaterThan(0);

    const run = await stack.settled("messages-cache", 2);
    const whole = (u: Anthropic.Usage) =>
      u.input_tokens + (u.cache_creation_input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0);
    expect(run.steps.map((s) => [s.inputTokens, s.cacheWriteTokens, s.cachedInputTokens])).toEqual([
      [whole(first.usage), first.usage.cache_creation_input_tokens, first.usage.cache_read_input_tokens ?? 0],
      [
        whole(second.usage),
        second.usage.cache_creation_input_tokens ?? 0,
        second.usage.cache_read_input_tokens,
      ],
    ]);
    // Haiku 3.5: $0.80 / M input, $1 / M cache write, $0.08 / M cache read, $4 / M output.
    const nano = (u: Anthropic.Usage) =>
      Math.round(
        u.input_tokens * 800 +
          (u.cache_creation_input_tokens ?? 0) * 1_000 +
          (u.cache_read_input_tokens ?? 0) * 80 +
          u.output_tokens * 4_000,
      );
    expect(run.steps.map((s) => s.costNanoUsd)).toEqual([nano(first.usage), nano(second.usage)]);
    const sums = await waitFor(
      async () => {
        const [row] = await stack.sql<{ n: string; written: string; read: string }>(
          "SELECT count() AS n, sum(cache_write_tokens) AS written, sum(cached_input_tokens) AS read FROM steps WHERE run_id = 'messages-cache'",
        );
        return Number(row?.n) === 2 ? row : undefined;
      },
      { timeoutMs: 10_000, message: "the steps never reached ClickHouse" },
    );
    expect(Number(sums.written)).toBe(run.totals.cacheWriteTokens);
    expect(Number(sums.read)).toBe(run.totals.cachedInputTokens);
  });

  it("records the tools the model asked for, streamed or not, its input spread over many deltas", async () => {
    const client = stack.anthropic({ headers: { "X-Holdfast-Run": "messages-tools" } });
    const ask = {
      model: MODEL,
      max_tokens: 256,
      tools: [WEATHER],
      messages: [{ role: "user" as const, content: callDirective("get_weather", { city: "Reykjavik" }) }],
    };
    const plain = await client.messages.create(ask);
    expect(plain.stop_reason).toBe("tool_use");
    const streamed = await client.messages.stream(ask).finalMessage();
    expect(streamed.content.find((b) => b.type === "tool_use")).toMatchObject({
      input: { city: "Reykjavik" },
    });

    const run = await stack.settled("messages-tools", 2);
    expect(run.steps.map((s) => [s.stream, s.finishReason, s.toolCalls])).toEqual([
      [false, "tool_use", ["get_weather"]],
      [true, "tool_use", ["get_weather"]],
    ]);
  });

  it("names the run from metadata.user_id when no header does", async () => {
    await stack.anthropic().messages.create({
      model: MODEL,
      max_tokens: 64,
      metadata: { user_id: "agent-by-user-id" },
      messages: [{ role: "user", content: "hi" }],
    });
    const run = await stack.settled("agent-by-user-id", 1);
    expect(run.identifiedBy).toMatchObject({ source: "body", key: "metadata.user_id" });
  });

  it("passes errors through as the SDK's typed errors in Anthropic's shape, and records them", async () => {
    const headers = { "X-Holdfast-Run": "messages-errors" };
    const ask = { model: MODEL, max_tokens: 64, messages: [{ role: "user" as const, content: "hi" }] };
    const refused = await stack
      .anthropic({ apiKey: "sk-bad-anthropic-000000000000000", headers })
      .messages.create(ask)
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(Anthropic.AuthenticationError);

    const overloaded = await stack
      .anthropic({ headers: { ...headers, "x-fake-fail": "529" } })
      .messages.create(ask)
      .catch((e: unknown) => e);
    expect(overloaded).toBeInstanceOf(Anthropic.APIError);
    expect((overloaded as InstanceType<typeof Anthropic.APIError>).status).toBe(529);

    const broken = stack
      .anthropic({ headers: { ...headers, "x-fake-fail": "error-after:3" } })
      .messages.stream({ ...ask, messages: [{ role: "user", content: "a long answer please" }] });
    const midStream = await broken.finalMessage().catch((e: unknown) => e);
    expect(midStream).toBeInstanceOf(Anthropic.APIError);

    const run = await stack.settled("messages-errors", 3);
    expect(
      run.steps.map((s) => [s.status, s.upstreamStatus, s.failure?.reason, s.failure?.errorType]),
    ).toEqual([
      ["failed", 401, "upstream_status", "authentication_error"],
      ["failed", 529, "upstream_status", "overloaded_error"],
      ["failed", 200, "upstream_stream_error", "overloaded_error"],
    ]);
  });

  it("answers a body it cannot read with Anthropic's error envelope, forwarding nothing", async () => {
    const before = stack.provider.requests.length;
    const response = await fetch(`${new URL(stack.gatewayUrl).origin}/v1/messages`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": API_KEY,
        "anthropic-version": "2023-06-01",
      },
      body: JSON.stringify({ model: MODEL, max_tokens: 10, messages: "not a list" }),
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe("error");
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message).toMatch(/messages/);
    expect(stack.provider.requests.length).toBe(before);
  });

  it("passes count_tokens through to the provider, unmetered", async () => {
    const counted = await stack
      .anthropic({ headers: { "X-Holdfast-Run": "messages-count" } })
      .messages.countTokens({
        model: MODEL,
        messages: [{ role: "user", content: "How many tokens is this?" }],
      });
    expect(counted.input_tokens).toBeGreaterThan(0);
    expect(stack.provider.requests.at(-1)?.path).toBe("/v1/messages/count_tokens");
    expect((await stack.bus.readRun("messages-count")).events).toHaveLength(0);
  });
});
