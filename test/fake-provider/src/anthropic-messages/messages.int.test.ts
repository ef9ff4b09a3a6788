import Anthropic from "@anthropic-ai/sdk";
import type {
  MessageCreateParamsNonStreaming,
  RawMessageStreamEvent,
} from "@anthropic-ai/sdk/resources/messages";
import { describe, expect, it } from "vitest";
import { callDirective } from "../directives.js";
import { type FakeProvider, startFakeProvider } from "../server.js";
import { API_KEY, EventReader, post, postAnthropic } from "../test-client.js";

const MODEL = "claude-3-5-haiku-20241022";
const hello: MessageCreateParamsNonStreaming = {
  model: MODEL,
  max_tokens: 256,
  messages: [{ role: "user", content: "Hello there, how are you?" }],
};
const weatherTool = {
  name: "get_weather",
  description: "The weather in a city",
  input_schema: { type: "object" as const, properties: { city: { type: "string" } } },
};
const instructions = "You are a careful agent. ".repeat(40);
const cachedSystem = [
  { type: "text" as const, text: instructions, cache_control: { type: "ephemeral" as const } },
];

function client(provider: FakeProvider, options: { apiKey?: string; headers?: Record<string, string> } = {}) {
  return new Anthropic({
    apiKey: options.apiKey ?? API_KEY,
    baseURL: provider.url,
    defaultHeaders: options.headers,
    maxRetries: 0,
  });
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error("expected a rejection");
    },
    (error: unknown) => error,
  );
}

describe("messages", () => {
  it("answers in Anthropic's message shape, with usage and rate-limit headers", async () => {
    const now = Date.parse("2025-06-01T12:00:00Z");
    await using provider = await startFakeProvider({ clock: () => now });

    const response = await postAnthropic(provider, "/v1/messages", hello);

    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("application/json");
    expect(response.headers.get("request-id")).toBe(provider.requests[0]!.id);
    expect(response.headers.get("anthropic-ratelimit-requests-remaining")).toBe("999999");
    expect(response.headers.get("anthropic-ratelimit-input-tokens-remaining")).toBe(String(100_000_000 - 13));
    expect(response.headers.get("anthropic-ratelimit-output-tokens-remaining")).toBe(
      String(100_000_000 - 256),
    );
    expect(response.headers.get("anthropic-ratelimit-tokens-limit")).toBe("100000000");
    expect(response.headers.get("anthropic-ratelimit-requests-reset")).toBe("2025-06-01T12:00:01Z");
    expect(await response.json()).toEqual({
      id: expect.stringMatching(/^msg_01[0-9A-Za-z]{22}$/),
      type: "message",
      role: "assistant",
      model: MODEL,
      content: [{ type: "text", text: "Fake reply to: Hello there, how are you?", citations: null }],
      stop_reason: "end_turn",
      stop_sequence: null,
      stop_details: null,
      container: null,
      diagnostics: null,
      usage: {
        // 2 + 4 + ceil(25 / 4) for the prompt, ceil(40 / 4) for the reply.
        input_tokens: 13,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
        output_tokens: 10,
        output_tokens_details: null,
        server_tool_use: null,
        service_tier: "standard",
        inference_geo: null,
        speed: "standard",
      },
    });
  });

  it("serves the official SDK, which sends its key as a bearer token, recording the call as Anthropic's", async () => {
    await using provider = await startFakeProvider();

    const message = await client(provider).messages.create({
      ...hello,
      model: "claude-sonnet-4-5",
      system: "Be brief.",
      metadata: { user_id: "user-1" },
    });

    expect(message.content).toEqual([
      { type: "text", text: "Fake reply to: Hello there, how are you?", citations: null },
    ]);
    expect(message.model).toBe("claude-sonnet-4-5");
    expect(message.usage.input_tokens).toBe(13 + 3);
    expect(provider.requests[0]).toMatchObject({
      api: "anthropic_messages",
      path: "/v1/messages",
      apiKey: API_KEY,
      body: { model: "claude-sonnet-4-5", system: "Be brief." },
    });
    expect(provider.requests[0]!.headers).toMatchObject({
      authorization: `Bearer ${API_KEY}`,
      "anthropic-version": "2026-10-21",
    });
  });

  it("stops at max_tokens and says so", async () => {
    await using provider = await startFakeProvider();
    const message = await client(provider).messages.create({ ...hello, max_tokens: 3 });
    expect(message).toMatchObject({
      content: [{ type: "text", text: "Fake reply t" }],
      stop_reason: "max_tokens",
      usage: { output_tokens: 3 },
    });
  });

  it("streams the events the SDK assembles into the same message", async () => {
    await using provider = await startFakeProvider();
    const whole = await client(provider).messages.create(hello);

    const stream = client(provider).messages.stream(hello);
    const texts: string[] = [];
    stream.on("text", (text) => texts.push(text));
    const events: RawMessageStreamEvent[] = [];
    stream.on("streamEvent", (event) => events.push(event));
    const final = await stream.finalMessage();

    expect(final.content).toEqual(whole.content);
    expect(final.usage).toEqual(whole.usage);
    expect(final.stop_reason).toBe("end_turn");
    expect(texts.length).toBeGreaterThanOrEqual(3);
    expect(texts.join("")).toBe("Fake reply to: Hello there, how are you?");
    expect(events[0]).toMatchObject({ type: "message_start", message: { usage: { input_tokens: 13 } } });
  });

  it("names every event on the wire, pings after the first block opens, and reports usage at both ends", async () => {
    await using provider = await startFakeProvider();

    const response = await postAnthropic(provider, "/v1/messages", { ...hello, stream: true });

    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(response.headers.get("anthropic-ratelimit-requests-limit")).toBe("1000000");
    const { events, error } = await new EventReader(response).restNamed();
    expect(error).toBeUndefined();
    const names = events.map((event) => event.event);
    expect(names.slice(0, 3)).toEqual(["message_start", "content_block_start", "ping"]);
    expect(names.slice(3, -3).every((name) => name === "content_block_delta")).toBe(true);
    expect(names.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
    for (const { event, data } of events) expect(JSON.parse(data).type).toBe(event);
    const [start, , , , ...rest] = events.map((event) => JSON.parse(event.data));
    expect(start.message).toMatchObject({
      content: [],
      stop_reason: null,
      usage: { input_tokens: 13, output_tokens: 1 },
    });
    expect(rest.at(-2)).toEqual({
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null, stop_details: null, container: null },
      usage: {
        input_tokens: 13,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: 10,
      },
    });
    expect(provider.requests[0]!.chunksSent).toBe(events.length);
  });
});

describe("tool use", () => {
  const askWeather: MessageCreateParamsNonStreaming = {
    ...hello,
    tools: [weatherTool],
    messages: [
      {
        role: "user",
        content: `Weather? ${callDirective("get_weather", { city: "Paris", unit: "celsius" })}`,
      },
    ],
  };

  it("answers a directive naming a declared tool with a tool_use block and stop_reason tool_use", async () => {
    await using provider = await startFakeProvider();

    const message = await client(provider).messages.create(askWeather);

    expect(message.content).toEqual([
      {
        type: "tool_use",
        id: expect.stringMatching(/^toolu_01[0-9A-Za-z]{22}$/),
        name: "get_weather",
        input: { city: "Paris", unit: "celsius" },
        caller: { type: "direct" },
      },
    ]);
    expect(message.stop_reason).toBe("tool_use");
  });

  it("answers in words when tool_choice is none", async () => {
    await using provider = await startFakeProvider();
    const message = await client(provider).messages.create({ ...askWeather, tool_choice: { type: "none" } });
    expect(message.content[0]).toMatchObject({ type: "text" });
  });

  it("streams the input as JSON fragments over many deltas, which the SDK parses", async () => {
    await using provider = await startFakeProvider();

    const stream = client(provider).messages.stream(askWeather);
    const fragments: string[] = [];
    stream.on("inputJson", (fragment) => fragments.push(fragment));
    const final = await stream.finalMessage();

    expect(fragments.length).toBeGreaterThanOrEqual(5);
    expect(fragments.join("")).toBe('{"city":"Paris","unit":"celsius"}');
    expect(final.content).toEqual([
      expect.objectContaining({
        type: "tool_use",
        name: "get_weather",
        input: { city: "Paris", unit: "celsius" },
      }),
    ]);
    expect(final.stop_reason).toBe("tool_use");
  });

  it("answers a tool result in words", async () => {
    await using provider = await startFakeProvider();
    const anthropic = client(provider);
    const call = await anthropic.messages.create(askWeather);
    const [block] = call.content;
    if (block?.type !== "tool_use") throw new Error("expected a tool use");

    const answer = await anthropic.messages.create({
      ...askWeather,
      messages: [
        ...askWeather.messages,
        { role: "assistant", content: call.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: block.id, content: "Sunny, 21 °C" }] },
      ],
    });

    expect(answer.content).toEqual([
      { type: "text", text: "Fake reply to tool result: Sunny, 21 °C", citations: null },
    ]);
  });
});

describe("prompt cache", () => {
  it("writes the prefix at a cache_control breakpoint, then reads it, input_tokens counting neither", async () => {
    await using provider = await startFakeProvider();
    const anthropic = client(provider);
    const request = { ...hello, system: cachedSystem };

    const first = await anthropic.messages.create(request);
    const second = await anthropic.messages.create(request);
    const otherKey = await client(provider, { apiKey: "sk-other" }).messages.create(request);

    // The prefix: 2 + ceil(1,000 / 4) for the system prompt; then 4 + ceil(25 / 4) for the message.
    expect(first.usage).toMatchObject({
      input_tokens: 11,
      cache_creation_input_tokens: 252,
      cache_read_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 252, ephemeral_1h_input_tokens: 0 },
    });
    expect(second.usage).toMatchObject({
      input_tokens: 11,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 252,
    });
    expect(otherKey.usage).toMatchObject({ cache_creation_input_tokens: 252, cache_read_input_tokens: 0 });
  });

  it("reads what an earlier turn wrote when the breakpoint has moved on, and writes the rest", async () => {
    await using provider = await startFakeProvider();
    const anthropic = client(provider);
    const first = await anthropic.messages.create({ ...hello, system: cachedSystem });

    const next = await anthropic.messages.create({
      ...hello,
      system: cachedSystem,
      messages: [
        ...hello.messages,
        { role: "assistant", content: first.content },
        {
          role: "user",
          content: [{ type: "text", text: "And then?", cache_control: { type: "ephemeral", ttl: "1h" } }],
        },
      ],
    });

    const total = 252 + 11 + (4 + 10) + (4 + 3);
    expect(next.usage).toMatchObject({
      input_tokens: 0,
      cache_read_input_tokens: 252,
      cache_creation_input_tokens: total - 252,
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: total - 252 },
    });
  });

  it("streams the cache counts in message_start, and reports what x-fake-cached-tokens says", async () => {
    await using provider = await startFakeProvider();
    const anthropic = client(provider);
    await anthropic.messages.create({ ...hello, system: cachedSystem });

    const streamed = await anthropic.messages.stream({ ...hello, system: cachedSystem }).finalMessage();
    const forced = await client(provider, { headers: { "x-fake-cached-tokens": "64" } }).messages.create(
      hello,
    );

    expect(streamed.usage).toMatchObject({ input_tokens: 11, cache_read_input_tokens: 252 });
    expect(forced.usage).toMatchObject({
      input_tokens: 0,
      cache_read_input_tokens: 13,
      cache_creation_input_tokens: 0,
    });
  });
});

describe("count_tokens", () => {
  it("counts the prompt a message call would send, tools and system included", async () => {
    await using provider = await startFakeProvider();
    const anthropic = client(provider);
    const request = { ...hello, system: cachedSystem, tools: [weatherTool] };
    const { max_tokens: _, ...countable } = request;

    const counted = await anthropic.messages.countTokens(countable);
    const message = await anthropic.messages.create(request);

    const { input_tokens, cache_creation_input_tokens, cache_read_input_tokens } = message.usage;
    expect(counted).toEqual({
      input_tokens: input_tokens + (cache_creation_input_tokens ?? 0) + (cache_read_input_tokens ?? 0),
    });
    expect(counted.input_tokens).toBeGreaterThan(263);
    expect(provider.requests[0]).toMatchObject({
      api: "anthropic_count_tokens",
      path: "/v1/messages/count_tokens",
    });
  });
});

describe("refusals in Anthropic's error shape, as the SDK's typed errors", () => {
  it("401 authentication_error without x-api-key, or for a refused key", async () => {
    await using provider = await startFakeProvider();

    const missing = await postAnthropic(provider, "/v1/messages", hello, { apiKey: null });
    const refused = await rejection(
      client(provider, { apiKey: "sk-bad-0123456789abcdef1234" }).messages.create(hello),
    );

    expect(missing.status).toBe(401);
    expect(missing.headers.get("anthropic-ratelimit-requests-limit")).toBeNull();
    expect(await missing.json()).toEqual({
      type: "error",
      error: { type: "authentication_error", message: "x-api-key header is required" },
      request_id: provider.requests[0]!.id,
    });
    expect(refused).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(refused).toMatchObject({
      status: 401,
      type: "authentication_error",
      requestID: provider.requests[1]!.id,
    });
  });

  it("400 without anthropic-version, or without max_tokens, naming what is missing", async () => {
    await using provider = await startFakeProvider();

    const noVersion = await post(provider, "/v1/messages", hello, {
      apiKey: null,
      headers: { "x-api-key": API_KEY },
    });
    const { max_tokens: _, ...noMaxTokens } = hello;
    const error = await rejection(
      client(provider).messages.create(noMaxTokens as MessageCreateParamsNonStreaming),
    );

    expect(noVersion.status).toBe(400);
    expect(noVersion.headers.get("anthropic-ratelimit-requests-limit")).toBe("1000000");
    expect(await noVersion.json()).toMatchObject({
      type: "error",
      error: { type: "invalid_request_error", message: "anthropic-version: header is required" },
    });
    expect(error).toBeInstanceOf(Anthropic.BadRequestError);
    expect(error).toMatchObject({ type: "invalid_request_error", apiMessage: "max_tokens: Field required" });
  });

  it("429 rate_limit_error with retry-after and anthropic-ratelimit-* once input tokens are spent", async () => {
    const now = Date.parse("2025-06-01T12:00:00Z");
    await using provider = await startFakeProvider({
      limitsByKey: { [API_KEY]: { itpm: 20 } },
      clock: () => now,
    });
    const anthropic = client(provider);

    await anthropic.messages.create(hello);
    const error = await rejection(anthropic.messages.create(hello));

    expect(error).toBeInstanceOf(Anthropic.RateLimitError);
    const { headers, apiMessage } = error as InstanceType<typeof Anthropic.RateLimitError>;
    expect(apiMessage).toMatch(
      /^This request would exceed your organization's rate limit of 20 input tokens per minute \(org: [-0-9a-f]+, model: claude-3-5-haiku-20241022\)\./,
    );
    // 6 tokens missing at 20 a minute.
    expect(headers.get("retry-after")).toBe("18");
    expect(headers.get("anthropic-ratelimit-input-tokens-limit")).toBe("20");
    expect(headers.get("anthropic-ratelimit-input-tokens-remaining")).toBe("7");
    // Full again 13 tokens later, at 20 a minute.
    expect(headers.get("anthropic-ratelimit-input-tokens-reset")).toBe("2025-06-01T12:00:39Z");
    // The input bucket is the more restrictive one.
    expect(headers.get("anthropic-ratelimit-tokens-remaining")).toBe("7");
    expect(headers.get("anthropic-ratelimit-requests-remaining")).toBe("999999");
    expect(headers.get("anthropic-ratelimit-output-tokens-remaining")).toBe(String(100_000_000 - 256));
  });

  it("x-fake-fail: 529 overloaded_error, 429 with retry-after, as the SDK's error for each", async () => {
    await using provider = await startFakeProvider();

    const overloaded = await rejection(
      client(provider, { headers: { "x-fake-fail": "529" } }).messages.create(hello),
    );
    const limited = await rejection(
      client(provider, { headers: { "x-fake-fail": "429" } }).messages.create(hello),
    );

    expect(overloaded).toBeInstanceOf(Anthropic.OverloadedError);
    expect(overloaded).toMatchObject({ status: 529, type: "overloaded_error", apiMessage: "Overloaded" });
    expect(limited).toBeInstanceOf(Anthropic.RateLimitError);
    expect((limited as InstanceType<typeof Anthropic.RateLimitError>).headers.get("retry-after")).toBe("1");
  });
});

describe("a stream that fails midway", () => {
  it("ends with an overloaded_error event the SDK raises as an APIError", async () => {
    await using provider = await startFakeProvider();
    const anthropic = client(provider, { headers: { "x-fake-fail": "error-after:3" } });

    const error = await rejection(anthropic.messages.stream(hello).finalMessage());
    const stream = await anthropic.messages.create({ ...hello, stream: true });
    const seen: string[] = [];
    const iterated = await rejection(
      (async () => {
        for await (const event of stream) seen.push(event.type);
      })(),
    );

    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect(error).toMatchObject({ type: "overloaded_error" });
    // The SDK drops pings.
    expect(seen).toEqual(["message_start", "content_block_start"]);
    expect(iterated).toMatchObject({ type: "overloaded_error" });
  });

  it("sends it as Anthropic does: event error, Anthropic's envelope", async () => {
    await using provider = await startFakeProvider();
    const response = await postAnthropic(
      provider,
      "/v1/messages",
      { ...hello, stream: true },
      {
        headers: { "x-fake-fail": "error-after:1" },
      },
    );

    const { events } = await new EventReader(response).restNamed();

    expect(events.map((event) => event.event)).toEqual(["message_start", "error"]);
    expect(JSON.parse(events[1]!.data)).toEqual({
      type: "error",
      error: { type: "overloaded_error", message: "Overloaded" },
    });
  });

  it("pause-after holds it and reset-after breaks it, as on the other APIs", async () => {
    await using provider = await startFakeProvider();

    const broken = await postAnthropic(
      provider,
      "/v1/messages",
      { ...hello, stream: true },
      {
        headers: { "x-fake-fail": "reset-after:3" },
      },
    );
    const { events, error } = await new EventReader(broken).restNamed();
    expect(events.map((event) => event.event)).toEqual(["message_start", "content_block_start", "ping"]);
    expect(error).toBeInstanceOf(Error);

    const held = await postAnthropic(
      provider,
      "/v1/messages",
      { ...hello, stream: true },
      {
        headers: { "x-fake-pause-after": "1" },
      },
    );
    const request = await provider.waitForRequest((candidate) => candidate.state === "paused");
    expect(request).toMatchObject({ api: "anthropic_messages", chunksSent: 1 });
    provider.resumePaused();
    expect((await new EventReader(held).restNamed()).events.at(-1)!.event).toBe("message_stop");
  });
});
