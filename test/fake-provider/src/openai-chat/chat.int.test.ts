import { describe, expect, it } from "vitest";
import { startFakeProvider } from "../server.js";
import { API_KEY, chunksOf, completionOf, EventReader, errorOf, postChat } from "../test-client.js";

const hello = { model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello there, how are you?" }] };
const weatherTool = { type: "function", function: { name: "get_weather", parameters: { type: "object" } } };

describe("chat completions", () => {
  it("answers in OpenAI's chat.completion shape, with usage derived from the request", async () => {
    await using provider = await startFakeProvider();

    const response = await postChat(provider, hello);

    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("application/json");
    expect(response.headers.get("x-request-id")).toBe(provider.requests[0]!.id);
    expect(Number(response.headers.get("openai-processing-ms"))).toBeGreaterThanOrEqual(0);
    expect(await response.json()).toEqual({
      id: expect.stringMatching(/^chatcmpl-\w+$/),
      object: "chat.completion",
      created: expect.any(Number),
      model: "gpt-4o-mini",
      choices: [
        {
          index: 0,
          message: {
            role: "assistant",
            content: "Fake reply to: Hello there, how are you?",
            refusal: null,
            annotations: [],
          },
          logprobs: null,
          finish_reason: "stop",
        },
      ],
      usage: {
        // 2 + 4 + ceil(25 / 4) for the prompt, ceil(40 / 4) for the reply.
        prompt_tokens: 13,
        completion_tokens: 10,
        total_tokens: 23,
        prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
        completion_tokens_details: {
          reasoning_tokens: 0,
          audio_tokens: 0,
          accepted_prediction_tokens: 0,
          rejected_prediction_tokens: 0,
        },
      },
      service_tier: "default",
      system_fingerprint: expect.stringMatching(/^fp_/),
    });
  });

  it("gives the same id, content and usage to the same request", async () => {
    await using provider = await startFakeProvider();
    const first = await completionOf(await postChat(provider, hello));
    const second = await completionOf(await postChat(provider, hello));
    expect(second.id).toBe(first.id);
    expect(second.choices).toEqual(first.choices);
    expect(second.usage).toEqual(first.usage);
  });

  it("cuts the reply at max_tokens with finish_reason length", async () => {
    await using provider = await startFakeProvider();
    const body = await completionOf(await postChat(provider, { ...hello, max_tokens: 2 }));
    expect(body.choices[0]).toMatchObject({ message: { content: "Fake rep" }, finish_reason: "length" });
    expect(body.usage.completion_tokens).toBe(2);
  });

  it("reports cached tokens when a key's prompt extends one it sent before", async () => {
    await using provider = await startFakeProvider();
    const system = { role: "system", content: "You are a careful agent. ".repeat(40) };
    const first = [system, { role: "user", content: "Step one." }];
    const second = [
      ...first,
      { role: "assistant", content: "Done." },
      { role: "user", content: "Step two." },
    ];

    const cold = await completionOf(await postChat(provider, { model: "gpt-4o", messages: first }));
    const warm = await completionOf(await postChat(provider, { model: "gpt-4o", messages: second }));
    const otherKey = await completionOf(
      await postChat(provider, { model: "gpt-4o", messages: second }, { apiKey: "sk-other" }),
    );
    const forced = await completionOf(
      await postChat(
        provider,
        { model: "gpt-4o", messages: first },
        { headers: { "x-fake-cached-tokens": "64" } },
      ),
    );

    expect(cold.usage.prompt_tokens).toBe(263);
    expect(cold.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(warm.usage.prompt_tokens_details.cached_tokens).toBe(256);
    expect(otherKey.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(forced.usage.prompt_tokens_details.cached_tokens).toBe(64);
  });

  it("streams chat.completion.chunk events: role, words, finish reason, [DONE]", async () => {
    await using provider = await startFakeProvider();
    const whole = await completionOf(await postChat(provider, hello));

    const response = await postChat(provider, { ...hello, stream: true });

    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const { events, error } = await new EventReader(response).rest();
    expect(error).toBeUndefined();
    const chunks = chunksOf(events);
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "", refusal: null });
    const words = chunks.slice(1, -1).map((chunk) => chunk.choices[0]!.delta.content);
    expect(words.length).toBeGreaterThanOrEqual(3);
    expect(words.join("")).toBe(whole.choices[0]!.message.content);
    expect(chunks.at(-1)!.choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }]);
    expect(new Set(chunks.map((chunk) => chunk.id))).toEqual(new Set([expect.stringMatching(/^chatcmpl-/)]));
    for (const chunk of chunks) {
      expect(chunk).toMatchObject({ object: "chat.completion.chunk", model: "gpt-4o-mini" });
      expect(chunk).not.toHaveProperty("usage");
    }
    expect(provider.requests[1]!.chunksSent).toBe(events.length);
  });

  it("with include_usage, streams usage null on each chunk and the usage in a last chunk without choices", async () => {
    await using provider = await startFakeProvider();
    const whole = await completionOf(await postChat(provider, hello));

    const response = await postChat(provider, {
      ...hello,
      stream: true,
      stream_options: { include_usage: true },
    });

    const chunks = chunksOf((await new EventReader(response).rest()).events);
    const usageChunk = chunks.at(-1)!;
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage).toEqual(whole.usage);
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe("stop");
    for (const chunk of chunks.slice(0, -1)) expect(chunk.usage).toBeNull();
  });
});

describe("scripted tool calls", () => {
  const askWeather = {
    model: "gpt-4o-mini",
    tools: [weatherTool],
    messages: [
      { role: "user", content: 'Weather? [[call:get_weather {"city":"Paris"}]] [[call:get_weather]]' },
    ],
  };

  it("answers a directive naming a declared tool with tool calls", async () => {
    await using provider = await startFakeProvider();

    const body = await completionOf(await postChat(provider, askWeather));

    expect(body.choices[0]).toEqual({
      index: 0,
      message: {
        role: "assistant",
        content: null,
        tool_calls: [
          {
            id: expect.stringMatching(/^call_/),
            type: "function",
            function: { name: "get_weather", arguments: '{"city":"Paris"}' },
          },
          {
            id: expect.stringMatching(/^call_/),
            type: "function",
            function: { name: "get_weather", arguments: "{}" },
          },
        ],
        refusal: null,
        annotations: [],
      },
      logprobs: null,
      finish_reason: "tool_calls",
    });
  });

  it("streams tool calls in OpenAI's delta format", async () => {
    await using provider = await startFakeProvider();
    const whole = await completionOf(await postChat(provider, askWeather));

    const response = await postChat(provider, { ...askWeather, stream: true });

    const chunks = chunksOf((await new EventReader(response).rest()).events);
    expect(chunks[0]!.choices[0]!.delta).toEqual({
      role: "assistant",
      content: null,
      tool_calls: [
        {
          index: 0,
          id: expect.stringMatching(/^call_\w+$/),
          type: "function",
          function: { name: "get_weather", arguments: "" },
        },
      ],
      refusal: null,
    });
    const calls: Array<{ id: string; type: string; function: { name: string; arguments: string } }> = [];
    for (const chunk of chunks) {
      for (const delta of chunk.choices[0]?.delta.tool_calls ?? []) {
        if (delta.id !== undefined) {
          calls[delta.index] = {
            id: delta.id,
            type: delta.type ?? "",
            function: { name: delta.function.name ?? "", arguments: "" },
          };
        }
        calls[delta.index]!.function.arguments += delta.function.arguments;
      }
    }
    // The same calls as without streaming; ids differ because the two requests differ.
    expect(calls).toEqual(
      whole.choices[0]!.message.tool_calls!.map((call) => ({ ...call, id: expect.stringMatching(/^call_/) })),
    );
    expect(new Set(calls.map((call) => call.id)).size).toBe(2);
    expect(chunks.length).toBeGreaterThan(4);
    expect(chunks.at(-1)!.choices[0]).toMatchObject({ delta: {}, finish_reason: "tool_calls" });
  });

  it("answers a tool result with content", async () => {
    await using provider = await startFakeProvider();
    const body = await completionOf(
      await postChat(provider, {
        ...askWeather,
        messages: [
          ...askWeather.messages,
          {
            role: "assistant",
            content: null,
            tool_calls: [
              { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } },
            ],
          },
          { role: "tool", tool_call_id: "call_1", content: "Sunny, 21 °C" },
        ],
      }),
    );
    expect(body.choices[0]).toMatchObject({
      message: { content: "Fake reply to tool result: Sunny, 21 °C" },
      finish_reason: "stop",
    });
  });
});

describe("refusals in OpenAI's error shape", () => {
  it("401 without an API key", async () => {
    await using provider = await startFakeProvider();
    const response = await postChat(provider, hello, { apiKey: null });
    expect(response.status).toBe(401);
    expect(response.headers.get("content-type")).toBe("application/json");
    expect(await response.json()).toEqual({
      error: {
        message: expect.stringContaining("You didn't provide an API key"),
        type: "invalid_request_error",
        param: null,
        code: null,
      },
    });
  });

  it("401 invalid_api_key for an sk-bad key, echoing it masked as OpenAI does", async () => {
    await using provider = await startFakeProvider();
    const key = "sk-bad-0123456789abcdef1234";

    const response = await postChat(provider, hello, { apiKey: key });

    expect(response.status).toBe(401);
    const error = await errorOf(response);
    expect(error).toMatchObject({ type: "invalid_request_error", param: null, code: "invalid_api_key" });
    expect(error.message).toMatch(
      /^Incorrect API key provided: sk-bad\*+1234\. You can find your API key at /,
    );
    expect(error.message).not.toContain(key);
  });

  it("400 for a body that is not JSON", async () => {
    await using provider = await startFakeProvider();
    const response = await postChat(provider, '{"model": "gpt-4o-mini",');
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({
      error: {
        message: expect.stringContaining("We could not parse the JSON body"),
        type: "invalid_request_error",
        param: null,
        code: null,
      },
    });
    expect(provider.requests[0]).toMatchObject({ body: undefined, rawBody: '{"model": "gpt-4o-mini",' });
  });

  it("400 naming the field when the body lacks messages or has a bad model", async () => {
    await using provider = await startFakeProvider();
    const noMessages = await postChat(provider, { model: "gpt-4o-mini" });
    const badModel = await postChat(provider, { model: 4, messages: hello.messages });
    expect(noMessages.status).toBe(400);
    expect(await errorOf(noMessages)).toMatchObject({
      param: "messages",
      code: "missing_required_parameter",
    });
    expect(badModel.status).toBe(400);
    expect(await errorOf(badModel)).toMatchObject({ param: "model", code: "invalid_type" });
  });

  it("404 in the same shape for a route OpenAI does not have", async () => {
    await using provider = await startFakeProvider();
    const response = await fetch(`${provider.url}/v1/completions/nope`);
    expect(response.status).toBe(404);
    expect(await response.json()).toEqual({
      error: {
        message: "Invalid URL (GET /v1/completions/nope)",
        type: "invalid_request_error",
        param: null,
        code: null,
      },
    });
  });
});

describe("rate limits", () => {
  it("refuses with 429, retry-after and x-ratelimit-* once the token bucket is spent, and takes nothing", async () => {
    let now = 1_700_000_000_000;
    await using provider = await startFakeProvider({
      limitsByKey: { [API_KEY]: { tpm: 50 } },
      clock: () => now,
    });
    // Costs 13 prompt tokens + max_tokens 20.
    const request = { ...hello, max_tokens: 20 };

    const first = await postChat(provider, request);
    const refused = await postChat(provider, request);

    expect(first.status).toBe(200);
    expect(first.headers.get("x-ratelimit-limit-tokens")).toBe("50");
    expect(first.headers.get("x-ratelimit-remaining-tokens")).toBe("17");
    expect(first.headers.get("x-ratelimit-remaining-requests")).toBe("999999");
    expect(first.headers.get("x-ratelimit-reset-tokens")).toBe("39.6s");

    expect(refused.status).toBe(429);
    // 16 tokens missing at 50 a minute: 19.2 s.
    expect(refused.headers.get("retry-after")).toBe("20");
    expect(refused.headers.get("retry-after-ms")).toBe("19200");
    expect(refused.headers.get("x-ratelimit-limit-requests")).toBe("1000000");
    expect(refused.headers.get("x-ratelimit-limit-tokens")).toBe("50");
    expect(refused.headers.get("x-ratelimit-remaining-tokens")).toBe("17");
    expect(refused.headers.get("x-ratelimit-reset-tokens")).toBe("39.6s");
    expect(refused.headers.get("x-ratelimit-reset-requests")).toBe("1ms");
    expect(await refused.json()).toEqual({
      error: {
        message:
          "Rate limit reached for gpt-4o-mini in organization org-fake on tokens per min (TPM): " +
          "Limit 50, Used 33, Requested 33. Please try again in 19.2s. " +
          "Visit https://platform.openai.com/account/rate-limits to learn more.",
        type: "tokens",
        param: null,
        code: "rate_limit_exceeded",
      },
    });

    // The refusal took nothing: a request that fits what was left still passes.
    const small = await postChat(provider, { ...hello, max_tokens: 4 });
    expect(small.status).toBe(200);
    expect(small.headers.get("x-ratelimit-remaining-tokens")).toBe("0");

    now += 60_000;
    expect((await postChat(provider, request)).status).toBe(200);
  });

  it("refuses on requests per minute with type requests", async () => {
    await using provider = await startFakeProvider({ rpm: 1, clock: () => 0 });
    expect((await postChat(provider, hello)).status).toBe(200);
    const refused = await postChat(provider, hello);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("60");
    expect(await errorOf(refused)).toMatchObject({ type: "requests", code: "rate_limit_exceeded" });
    // Another key has its own bucket.
    expect((await postChat(provider, hello, { apiKey: "sk-another" })).status).toBe(200);
  });
});

describe("the request log", () => {
  it("records each request's headers, body, key, status and final state, in order", async () => {
    await using provider = await startFakeProvider();
    await fetch(`${provider.url}/health`);
    const response = await postChat(provider, hello, { headers: { "x-holdfast-run": "run-1" } });
    await response.text();

    const [health, chat] = provider.requests;
    expect(health).toMatchObject({ method: "GET", path: "/health", status: 200 });
    expect(await chat!.done).toBe("done");
    expect(chat).toMatchObject({
      method: "POST",
      path: "/v1/chat/completions",
      apiKey: API_KEY,
      body: hello,
      rawBody: JSON.stringify(hello),
      status: 200,
      state: "done",
      receivedAt: expect.any(Number),
    });
    expect(chat!.headers).toMatchObject({
      authorization: `Bearer ${API_KEY}`,
      "content-type": "application/json",
      "x-holdfast-run": "run-1",
    });
  });

  it("waits for a request that has not arrived yet, and times out naming what it saw", async () => {
    await using provider = await startFakeProvider();
    const waiting = provider.waitForRequest((request) => request.path === "/v1/chat/completions");
    await fetch(`${provider.url}/health`);
    await postChat(provider, hello);
    expect((await waiting).body).toEqual(hello);

    await expect(provider.waitForRequest((request) => request.method === "PUT", 50)).rejects.toThrow(
      /no request matched within 50 ms \(2 received\)/,
    );
  });
});

describe("other routes", () => {
  it("serves /health and the model list", async () => {
    await using provider = await startFakeProvider();
    expect(await (await fetch(`${provider.url}/health`)).json()).toEqual({ status: "ok" });
    const models = (await (await fetch(`${provider.url}/v1/models`)).json()) as {
      object: string;
      data: Array<{ id: string }>;
    };
    expect(models.object).toBe("list");
    expect(models.data.map((model) => model.id)).toEqual(["gpt-4o-mini", "gpt-4o", "fake-unpriced-model"]);
    expect(models.data[0]).toEqual({
      id: "gpt-4o-mini",
      object: "model",
      created: expect.any(Number),
      owned_by: "system",
    });
  });
});
