import OpenAI from "openai";
import type { ResponseStreamEvent } from "openai/resources/responses/responses";
import { describe, expect, it } from "vitest";
import { callDirective } from "../directives.js";
import { type FakeProvider, startFakeProvider } from "../server.js";
import { API_KEY, EventReader, errorOf, post } from "../test-client.js";

const hello = { model: "gpt-4o-mini", input: "Hello there, how are you?" };
const weatherTool = {
  type: "function" as const,
  name: "get_weather",
  parameters: { type: "object", properties: { city: { type: "string" } } },
  strict: false,
};
const instructions = "You are a careful agent. ".repeat(40);

function client(provider: FakeProvider, options: { apiKey?: string; headers?: Record<string, string> } = {}) {
  return new OpenAI({
    apiKey: options.apiKey ?? API_KEY,
    baseURL: `${provider.url}/v1`,
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

describe("responses", () => {
  it("answers in OpenAI's response shape, with usage derived from the request", async () => {
    await using provider = await startFakeProvider();

    const response = await post(provider, "/v1/responses", { ...hello, metadata: { run: "r1" } });

    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("application/json");
    expect(response.headers.get("x-request-id")).toBe(provider.requests[0]!.id);
    expect(response.headers.get("x-ratelimit-limit-requests")).toBe("1000000");
    expect(Number(response.headers.get("openai-processing-ms"))).toBeGreaterThanOrEqual(0);
    const body = (await response.json()) as { created_at: number };
    expect(body).toEqual({
      id: expect.stringMatching(/^resp_[0-9a-f]{50}$/),
      object: "response",
      created_at: expect.any(Number),
      status: "completed",
      background: false,
      completed_at: body.created_at,
      error: null,
      incomplete_details: null,
      instructions: null,
      max_output_tokens: null,
      max_tool_calls: null,
      metadata: { run: "r1" },
      model: "gpt-4o-mini",
      output: [
        {
          id: expect.stringMatching(/^msg_[0-9a-f]{50}$/),
          type: "message",
          status: "completed",
          content: [
            {
              type: "output_text",
              annotations: [],
              logprobs: [],
              text: "Fake reply to: Hello there, how are you?",
            },
          ],
          role: "assistant",
        },
      ],
      parallel_tool_calls: true,
      previous_response_id: null,
      prompt_cache_key: null,
      reasoning: { effort: null, summary: null },
      safety_identifier: null,
      service_tier: "default",
      store: true,
      temperature: 1,
      text: { format: { type: "text" }, verbosity: "medium" },
      tool_choice: "auto",
      tools: [],
      top_logprobs: 0,
      top_p: 1,
      truncation: "disabled",
      usage: {
        // 2 + 4 + ceil(25 / 4) for the input, ceil(40 / 4) for the reply, as on Chat Completions.
        input_tokens: 13,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: 10,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: 23,
      },
      user: null,
    });
  });

  it("gives the SDK a response whose output_text it can read, instructions and input items counted", async () => {
    await using provider = await startFakeProvider();

    const response = await client(provider).responses.create({
      model: "gpt-4o-mini",
      instructions: "Be brief.",
      input: [
        { role: "user", content: "Earlier question" },
        { role: "assistant", content: "Earlier answer" },
        { role: "user", content: [{ type: "input_text", text: "Hello there, how are you?" }] },
      ],
    });

    expect(response.output_text).toBe("Fake reply to: Hello there, how are you?");
    expect(response.instructions).toBe("Be brief.");
    // 2 + (4 + 3) + (4 + 4) + (4 + 4) + (4 + 7)
    expect(response.usage?.input_tokens).toBe(36);
    expect(provider.requests[0]).toMatchObject({
      api: "openai_responses",
      path: "/v1/responses",
      apiKey: API_KEY,
      body: { model: "gpt-4o-mini", instructions: "Be brief." },
    });
  });

  it("streams named, numbered events the SDK assembles into the same response, usage included", async () => {
    await using provider = await startFakeProvider();
    const whole = await client(provider).responses.create(hello);

    const stream = client(provider).responses.stream(hello);
    const events: ResponseStreamEvent[] = [];
    stream.on("event", (event) => events.push(event));
    const final = await stream.finalResponse();

    // The SDK adds output_text to what create() returns, not to a stream's final response.
    const [message] = final.output;
    expect(message?.type === "message" && message.content[0]).toMatchObject({
      type: "output_text",
      text: whole.output_text,
    });
    expect(final.usage).toEqual(whole.usage);
    expect(final.status).toBe("completed");
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, index) => index));
    const types = events.map((event) => event.type);
    expect(types.slice(0, 4)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
    ]);
    expect(types.slice(-4)).toEqual([
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    const deltas = events.flatMap((event) =>
      event.type === "response.output_text.delta" ? [event.delta] : [],
    );
    expect(deltas.length).toBeGreaterThanOrEqual(3);
    expect(deltas.join("")).toBe(whole.output_text);
  });

  it("names each event on the wire after its type, and sends no [DONE]", async () => {
    await using provider = await startFakeProvider();

    const response = await post(provider, "/v1/responses", { ...hello, stream: true });

    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const { events, error } = await new EventReader(response).restNamed();
    expect(error).toBeUndefined();
    for (const { event, data } of events) expect(JSON.parse(data).type).toBe(event);
    expect(JSON.parse(events[0]!.data)).toMatchObject({
      sequence_number: 0,
      response: { status: "in_progress", output: [], usage: null },
    });
    expect(events.at(-1)!.event).toBe("response.completed");
    expect(events.some(({ data }) => data === "[DONE]")).toBe(false);
    expect(provider.requests[0]!.chunksSent).toBe(events.length);
  });

  it("ends a reply cut by max_output_tokens as incomplete, with response.incomplete on a stream", async () => {
    await using provider = await startFakeProvider();
    const long = {
      model: "gpt-4o-mini",
      input: "Tell me everything about the weather ".repeat(3),
      max_output_tokens: 16,
    };

    const response = await client(provider).responses.create(long);
    const streamed = await post(provider, "/v1/responses", { ...long, stream: true });

    expect(response).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
    });
    expect(response.output_text).toHaveLength(64);
    expect(response.usage?.output_tokens).toBe(16);
    const { events } = await new EventReader(streamed).restNamed();
    expect(events.at(-1)!.event).toBe("response.incomplete");
  });
});

describe("function calls", () => {
  const askWeather = {
    model: "gpt-4o-mini",
    tools: [weatherTool],
    input: `Weather? ${callDirective("get_weather", { city: "Paris", unit: "celsius" })}`,
  };

  it("answers a directive naming a declared function with function_call items", async () => {
    await using provider = await startFakeProvider();

    const response = await client(provider).responses.create(askWeather);

    expect(response.output).toEqual([
      {
        id: expect.stringMatching(/^fc_[0-9a-f]{50}$/),
        type: "function_call",
        status: "completed",
        arguments: '{"city":"Paris","unit":"celsius"}',
        call_id: expect.stringMatching(/^call_\w{24}$/),
        name: "get_weather",
      },
    ]);
    expect(response.output_text).toBe("");
    expect(response.tools).toEqual([{ ...weatherTool, description: null }]);
  });

  it("streams the arguments over many deltas, which the SDK joins", async () => {
    await using provider = await startFakeProvider();

    const stream = client(provider).responses.stream(askWeather);
    const deltas: string[] = [];
    stream.on("response.function_call_arguments.delta", (event) => deltas.push(event.delta));
    const done: string[] = [];
    stream.on("response.function_call_arguments.done", (event) => done.push(event.arguments));
    const final = await stream.finalResponse();

    expect(deltas.length).toBeGreaterThanOrEqual(4);
    expect(deltas.join("")).toBe('{"city":"Paris","unit":"celsius"}');
    expect(done).toEqual(['{"city":"Paris","unit":"celsius"}']);
    expect(final.output[0]).toMatchObject({
      type: "function_call",
      name: "get_weather",
      arguments: '{"city":"Paris","unit":"celsius"}',
    });
  });

  it("answers the function's output in words", async () => {
    await using provider = await startFakeProvider();
    const openai = client(provider);
    const call = await openai.responses.create(askWeather);
    const [item] = call.output;
    if (item?.type !== "function_call") throw new Error("expected a function call");

    const answer = await openai.responses.create({
      model: "gpt-4o-mini",
      tools: [weatherTool],
      input: [
        { role: "user", content: askWeather.input },
        item,
        { type: "function_call_output", call_id: item.call_id, output: "Sunny, 21 °C" },
      ],
    });

    expect(answer.output_text).toBe("Fake reply to tool result: Sunny, 21 °C");
  });
});

describe("previous_response_id", () => {
  it("goes on from a response the fake issued, counting the conversation so far, its prompt cached", async () => {
    await using provider = await startFakeProvider();
    const openai = client(provider);
    const first = await openai.responses.create({ ...hello, instructions });

    const second = await openai.responses.create({
      model: "gpt-4o-mini",
      previous_response_id: first.id,
      input: "And then?",
    });

    expect(first.usage?.input_tokens).toBe(267);
    expect(second.previous_response_id).toBe(first.id);
    expect(second.id).not.toBe(first.id);
    // The first prompt and reply (267 + 10), then 2 + 4 + ceil(9 / 4).
    expect(second.usage?.input_tokens).toBe(286);
    expect(second.usage?.input_tokens_details.cached_tokens).toBe(256);
    expect(second.output_text).toBe("Fake reply to: And then?");
  });

  it("refuses an id it never issued with OpenAI's 400, as the SDK's BadRequestError", async () => {
    await using provider = await startFakeProvider();

    const error = await rejection(
      client(provider).responses.create({ ...hello, previous_response_id: "resp_unknown" }),
    );

    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(error).toMatchObject({
      status: 400,
      message: "400 Previous response with id 'resp_unknown' not found.",
      type: "invalid_request_error",
      param: "previous_response_id",
      code: "previous_response_not_found",
    });
  });

  it("cannot go on from a response stored with store false, nor from another key's", async () => {
    await using provider = await startFakeProvider();
    const openai = client(provider);
    const unstored = await openai.responses.create({ ...hello, store: false });
    const stored = await openai.responses.create(hello);

    const afterUnstored = await post(provider, "/v1/responses", {
      ...hello,
      previous_response_id: unstored.id,
    });
    const otherKey = await post(
      provider,
      "/v1/responses",
      { ...hello, previous_response_id: stored.id },
      { apiKey: "sk-another-project" },
    );

    expect(unstored).toMatchObject({ store: false });
    expect(afterUnstored.status).toBe(400);
    expect(otherKey.status).toBe(400);
    expect(await errorOf(otherKey)).toMatchObject({ param: "previous_response_id" });
  });
});

describe("prompt cache", () => {
  it("reports cached tokens when a key's input extends one it sent before, or what x-fake-cached-tokens says", async () => {
    await using provider = await startFakeProvider();
    const openai = client(provider);
    const first = [{ role: "user" as const, content: "Step one." }];
    const second = [
      ...first,
      { role: "assistant" as const, content: "Done." },
      { role: "user" as const, content: "Step two." },
    ];

    const cold = await openai.responses.create({ model: "gpt-4o", instructions, input: first });
    const warm = await openai.responses.create({ model: "gpt-4o", instructions, input: second });
    const forced = await client(provider, { headers: { "x-fake-cached-tokens": "64" } }).responses.create({
      model: "gpt-4o",
      instructions,
      input: first,
    });

    expect(cold.usage?.input_tokens_details.cached_tokens).toBe(0);
    expect(warm.usage?.input_tokens_details.cached_tokens).toBe(256);
    expect(forced.usage?.input_tokens_details.cached_tokens).toBe(64);
  });
});

describe("refusals, as the SDK's typed errors", () => {
  it("401 for a refused key: AuthenticationError", async () => {
    await using provider = await startFakeProvider();
    const error = await rejection(
      client(provider, { apiKey: "sk-bad-0123456789abcdef1234" }).responses.create(hello),
    );
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(error).toMatchObject({ code: "invalid_api_key" });
  });

  it("400 naming the field for a body OpenAI would refuse: BadRequestError", async () => {
    await using provider = await startFakeProvider();
    const openai = client(provider);

    const noInput = await rejection(openai.responses.create({ model: "gpt-4o-mini" }));
    const tooFewTokens = await rejection(openai.responses.create({ ...hello, max_output_tokens: 5 }));
    const badRole = await post(provider, "/v1/responses", {
      model: "gpt-4o-mini",
      input: [{ role: "robot", content: "hi" }],
    });

    expect(noInput).toBeInstanceOf(OpenAI.BadRequestError);
    expect(noInput).toMatchObject({ param: "input", code: "missing_required_parameter" });
    expect(tooFewTokens).toMatchObject({ param: "max_output_tokens", code: "integer_below_min_value" });
    expect(await errorOf(badRole)).toMatchObject({ param: "input[0].role", code: "invalid_value" });
  });

  it("429 with retry-after and x-ratelimit-* once the key's tokens are spent: RateLimitError", async () => {
    const now = 1_700_000_000_000;
    await using provider = await startFakeProvider({
      limitsByKey: { [API_KEY]: { tpm: 30 } },
      clock: () => now,
    });
    const openai = client(provider);

    // 13 input + 10 output tokens.
    await openai.responses.create(hello);
    const error = await rejection(openai.responses.create(hello));

    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect(error).toMatchObject({ type: "tokens", code: "rate_limit_exceeded" });
    const { headers } = error as InstanceType<typeof OpenAI.RateLimitError>;
    // 16 tokens missing at 30 a minute.
    expect(headers.get("retry-after")).toBe("32");
    expect(headers.get("x-ratelimit-limit-tokens")).toBe("30");
    expect(headers.get("x-ratelimit-remaining-tokens")).toBe("7");
  });

  it("x-fake-fail: the status it names, as the SDK's error for that status", async () => {
    await using provider = await startFakeProvider();
    const error = await rejection(
      client(provider, { headers: { "x-fake-fail": "503" } }).responses.create(hello),
    );
    expect(error).toBeInstanceOf(OpenAI.InternalServerError);
    expect(error).toMatchObject({ status: 503, type: "server_error" });
  });
});

describe("a stream that fails midway", () => {
  it("ends with an error event the SDK raises as an APIError", async () => {
    await using provider = await startFakeProvider();
    const openai = client(provider, { headers: { "x-fake-fail": "error-after:3" } });

    const stream = await openai.responses.create({ ...hello, stream: true });
    const seen: string[] = [];
    const error = await rejection(
      (async () => {
        for await (const event of stream) seen.push(event.type);
      })(),
    );
    const helperError = await rejection(openai.responses.stream(hello).finalResponse());

    expect(seen).toEqual(["response.created", "response.in_progress", "response.output_item.added"]);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error).toMatchObject({ type: "server_error", code: "generation_failed" });
    expect((error as Error).message).toMatch(
      /^The server had an error while generating for the key ending in abcd/,
    );
    expect(helperError).toBeInstanceOf(OpenAI.APIError);
  });

  it("sends it as OpenAI does: event error, numbered, the error nested", async () => {
    await using provider = await startFakeProvider();
    const response = await post(
      provider,
      "/v1/responses",
      { ...hello, stream: true },
      {
        headers: { "x-fake-fail": "error-after:2" },
      },
    );

    const { events } = await new EventReader(response).restNamed();

    expect(events.map((event) => event.event)).toEqual(["response.created", "response.in_progress", "error"]);
    expect(JSON.parse(events[2]!.data)).toEqual({
      type: "error",
      sequence_number: 2,
      error: {
        message: expect.stringContaining("error while generating"),
        type: "server_error",
        param: null,
        code: "generation_failed",
      },
    });
  });

  it("reset-after and pause-after work as on Chat Completions", async () => {
    await using provider = await startFakeProvider();

    const broken = await post(
      provider,
      "/v1/responses",
      { ...hello, stream: true },
      {
        headers: { "x-fake-fail": "reset-after:2" },
      },
    );
    const { events, error } = await new EventReader(broken).restNamed();
    expect(events).toHaveLength(2);
    expect(error).toBeInstanceOf(Error);

    const held = await post(
      provider,
      "/v1/responses",
      { ...hello, stream: true },
      {
        headers: { "x-fake-pause-after": "1" },
      },
    );
    const request = await provider.waitForRequest((candidate) => candidate.state === "paused");
    expect(request.chunksSent).toBe(1);
    provider.resumePaused();
    expect((await new EventReader(held).restNamed()).events.at(-1)!.event).toBe("response.completed");
  });
});
