import { callDirective } from "@holdfast/fake-provider";
import { waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "./stack.js";

// The OpenAI Responses API through the gateway, as the official SDK calls it.
let stack: Stack;
const LIMITED_KEY = "sk-limited-responses-0000000000000";
beforeAll(async () => {
  stack = await startStack({ provider: { chunkDelayMs: 1, limitsByKey: { [LIMITED_KEY]: { tpm: 100 } } } });
});
afterAll(async () => {
  await stack?.close();
});

const WEATHER = {
  type: "function" as const,
  name: "get_weather",
  description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  strict: false,
};

// gpt-4o-mini: $0.15 / M input ($0.075 cached), $0.60 / M output, in nano-USD per token.
function gpt4oMiniNano(input: number, cached: number, output: number): number {
  return Math.round((input - cached) * 150 + cached * 75 + output * 600);
}

describe("Responses through the gateway with the openai SDK", () => {
  it("answers as the provider does and records the call with usage, cost and the response id", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "responses-plain" } });
    const { data, response } = await client.responses
      .create({ model: "gpt-4o-mini", instructions: "Be brief.", input: "Say hello" })
      .withResponse();
    expect(data.output_text).toBe("Fake reply to: Say hello");
    expect(response.headers.get("x-ratelimit-remaining-requests")).not.toBeNull();
    // The provider saw the request as sent, with the client's own key.
    const sent = stack.provider.requests.at(-1)!;
    expect(sent.path).toBe("/v1/responses");
    expect(sent.headers.authorization).toBe(`Bearer ${API_KEY}`);

    const run = await stack.settled("responses-plain", 1);
    const usage = data.usage!;
    expect(run.steps[0]).toMatchObject({
      status: "completed",
      api: "openai_responses",
      model: "gpt-4o-mini",
      upstreamStatus: 200,
      inputTokens: usage.input_tokens,
      cachedInputTokens: usage.input_tokens_details.cached_tokens,
      outputTokens: usage.output_tokens,
      usageReported: true,
      finishReason: "completed",
      responseId: data.id,
    });
    expect(run.steps[0]?.costNanoUsd).toBe(
      gpt4oMiniNano(usage.input_tokens, usage.input_tokens_details.cached_tokens, usage.output_tokens),
    );
    const rows = await waitFor(
      async () => {
        const found = await stack.sql<{ api: string; response_id: string; input_tokens: number }>(
          "SELECT api, response_id, input_tokens FROM steps WHERE run_id = 'responses-plain'",
        );
        return found.length === 1 ? found : undefined;
      },
      { timeoutMs: 10_000, message: "the step never reached ClickHouse" },
    );
    expect(rows[0]).toMatchObject({ api: "openai_responses", response_id: data.id });
    expect(Number(rows[0]?.input_tokens)).toBe(usage.input_tokens);
  });

  it("streams every event unchanged and meters the usage of response.completed", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "responses-stream" } });
    const stream = client.responses.stream({ model: "gpt-4o-mini", input: "Tell me about lighthouses" });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    const final = await stream.finalResponse();
    expect(types[0]).toBe("response.created");
    expect(types.at(-1)).toBe("response.completed");
    expect(types.filter((t) => t === "response.output_text.delta").length).toBeGreaterThan(2);

    const run = await stack.settled("responses-stream", 1);
    expect(run.steps[0]).toMatchObject({
      status: "completed",
      stream: true,
      inputTokens: final.usage?.input_tokens,
      outputTokens: final.usage?.output_tokens,
      responseId: final.id,
      finishReason: "completed",
    });
    expect(run.steps[0]?.costNanoUsd).toBeGreaterThan(0);
  });

  it("records the functions the model called, streamed or not", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "responses-tools" } });
    const ask = {
      model: "gpt-4o-mini",
      tools: [WEATHER],
      input: callDirective("get_weather", { city: "Oslo" }),
    };
    const plain = await client.responses.create(ask);
    const call = plain.output.find((item) => item.type === "function_call");
    expect(call).toMatchObject({ name: "get_weather", arguments: '{"city":"Oslo"}' });
    const streamed = await client.responses.stream(ask).finalResponse();
    expect(streamed.output.find((item) => item.type === "function_call")).toMatchObject({
      name: "get_weather",
    });

    const run = await stack.settled("responses-tools", 2);
    expect(run.steps.map((s) => [s.stream, s.toolCalls])).toEqual([
      [false, ["get_weather"]],
      [true, ["get_weather"]],
    ]);
  });

  it("passes the provider's errors through as the SDK's typed errors, and records them", async () => {
    const headers = { "X-Holdfast-Run": "responses-errors" };
    const refused = await stack
      .client({ apiKey: "sk-bad-0000000000000000000000", headers })
      .responses.create({ model: "gpt-4o-mini", input: "hi" })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OpenAI.AuthenticationError);

    const limited = await stack
      .client({ apiKey: LIMITED_KEY, headers })
      .responses.create({ model: "gpt-4o-mini", input: "x".repeat(2_000) })
      .catch((e: unknown) => e);
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError);
    // The provider's rate-limit headers reach the client as sent.
    const limitedHeaders = (limited as InstanceType<typeof OpenAI.RateLimitError>).headers;
    expect(limitedHeaders?.get("x-ratelimit-limit-tokens")).toBe("100");

    const broken = stack
      .client({ headers: { ...headers, "x-fake-fail": "error-after:3" } })
      .responses.stream({ model: "gpt-4o-mini", input: "a long answer please" });
    const midStream = await (async () => {
      for await (const _ of broken) {
        // drain until the provider's error
      }
    })().catch((e: unknown) => e);
    expect(midStream).toBeInstanceOf(OpenAI.APIError);

    const run = await stack.settled("responses-errors", 3);
    expect(run.steps.map((s) => [s.status, s.upstreamStatus, s.failure?.reason])).toEqual([
      ["failed", 401, "upstream_status"],
      ["failed", 429, "upstream_status"],
      ["failed", 200, "upstream_stream_error"],
    ]);
    expect(run.steps[0]?.failure?.message).not.toContain("sk-bad-0000000000000000000000");
  });

  it("refuses a body it cannot read in OpenAI's shape, forwarding nothing", async () => {
    const before = stack.provider.requests.length;
    const error = await stack
      .client()
      .responses.create({ model: "gpt-4o-mini", input: 42 as unknown as string })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("input");
    expect(stack.provider.requests.length).toBe(before);
  });

  it("puts a request that continues a response in that response's run, whichever gateway it reaches", async () => {
    const first = await stack
      .client({ headers: { "X-Holdfast-Run": "responses-chain" } })
      .responses.create({ model: "gpt-4o-mini", input: "Remember the word lighthouse" });
    // At once, on another gateway, naming no run: only previous_response_id ties it.
    const other = await stack.extraGateway({});
    const second = await other.client().responses.create({
      model: "gpt-4o-mini",
      previous_response_id: first.id,
      input: "What was the word?",
    });
    const third = await stack
      .client()
      .responses.stream({ model: "gpt-4o-mini", previous_response_id: second.id, input: "Again?" })
      .finalResponse();

    const run = await stack.settled("responses-chain", 3);
    expect(run.steps.map((s) => s.responseId)).toEqual([first.id, second.id, third.id]);
    const events = (await stack.bus.readRun("responses-chain")).events.map((e) => e.envelope);
    const identities = events.flatMap((e) =>
      e.payload?.$case === "stepStarted"
        ? [[e.payload.value.identity?.source, e.payload.value.identity?.key]]
        : [],
    );
    expect(identities).toEqual([
      [1, "X-Holdfast-Run"],
      [5, first.id],
      [5, second.id],
    ]);
    // The provider charged the continued conversation as input, part of it cached.
    expect(second.usage?.input_tokens).toBeGreaterThan(first.usage?.input_tokens ?? 0);
    expect(run.steps[1]?.inputTokens).toBe(second.usage?.input_tokens);
  });
});
