import { describe, expect, it } from "vitest";
import { startFakeProvider } from "./server.js";
import { chunksOf, EventReader, errorOf, postChat } from "./test-client.js";

const streamed = {
  model: "gpt-4o-mini",
  stream: true,
  messages: [{ role: "user", content: "Tell me about the weather in Paris today" }],
};
const plain = { ...streamed, stream: false };

describe("x-fake-fail", () => {
  it("answers the status it names with an OpenAI error body", async () => {
    await using provider = await startFakeProvider();

    const serverError = await postChat(provider, plain, { headers: { "x-fake-fail": "500" } });
    const overloaded = await postChat(provider, plain, { headers: { "x-fake-fail": "503" } });

    expect(serverError.status).toBe(500);
    expect(serverError.headers.get("content-type")).toBe("application/json");
    expect(await serverError.json()).toEqual({
      error: {
        message: "The server had an error while processing your request. Sorry about that!",
        type: "server_error",
        param: null,
        code: null,
      },
    });
    expect(overloaded.status).toBe(503);
    expect((await errorOf(overloaded)).type).toBe("server_error");
    expect(provider.requests.map((request) => request.status)).toEqual([500, 503]);
  });

  it("reset: cuts the connection without an answer", async () => {
    await using provider = await startFakeProvider();

    await expect(postChat(provider, plain, { headers: { "x-fake-fail": "reset" } })).rejects.toThrow();

    expect(await provider.requests[0]!.done).toBe("reset");
    expect(provider.requests[0]!.status).toBeUndefined();
  });

  it("reset-after:2: the client sees two events, then the stream breaks", async () => {
    await using provider = await startFakeProvider();

    const response = await postChat(provider, streamed, { headers: { "x-fake-fail": "reset-after:2" } });

    expect(response.status).toBe(200);
    const { events, error } = await new EventReader(response).rest();
    expect(events).toHaveLength(2);
    expect(JSON.parse(events[1]!).choices[0].delta.content).toBe("Fake ");
    expect(error).toBeInstanceOf(Error);
    expect(await provider.requests[0]!.done).toBe("reset");
    expect(provider.requests[0]!.chunksSent).toBe(2);
  });

  it("reset-after on a plain completion: headers and part of the body, then the break", async () => {
    await using provider = await startFakeProvider();
    const response = await postChat(provider, plain, { headers: { "x-fake-fail": "reset-after:20" } });
    expect(response.status).toBe(200);
    await expect(response.json()).rejects.toThrow();
    expect(await provider.requests[0]!.done).toBe("reset");
  });

  it("hang: never answers, until the client gives up", async () => {
    await using provider = await startFakeProvider();
    const abort = new AbortController();
    const answer = postChat(provider, plain, { headers: { "x-fake-fail": "hang" }, signal: abort.signal });

    const request = await provider.waitForRequest();
    expect(request).toMatchObject({ state: "open", status: undefined });
    abort.abort();

    await expect(answer).rejects.toThrow();
    expect(await request.done).toBe("aborted");
  });

  it("invalid-json: a 200 with a whole body that is not JSON", async () => {
    await using provider = await startFakeProvider();
    const response = await postChat(provider, plain, { headers: { "x-fake-fail": "invalid-json" } });
    expect(response.status).toBe(200);
    const text = await response.text();
    expect(text.startsWith('{"id":"chatcmpl-')).toBe(true);
    expect(() => JSON.parse(text)).toThrow();
    expect(await provider.requests[0]!.done).toBe("done");
  });

  it("rejects a value it does not understand, naming the header", async () => {
    await using provider = await startFakeProvider();
    const response = await postChat(provider, plain, { headers: { "x-fake-fail": "sometimes" } });
    expect(response.status).toBe(400);
    expect(await errorOf(response)).toMatchObject({
      type: "invalid_request_error",
      param: "x-fake-fail",
    });
  });
});

describe("x-fake-pause-after", () => {
  it("holds a stream after N events until resumePaused()", async () => {
    await using provider = await startFakeProvider();

    const response = await postChat(provider, streamed, { headers: { "x-fake-pause-after": "1" } });
    const reader = new EventReader(response);
    const first = await reader.next();

    expect(JSON.parse(first!).choices[0].delta.role).toBe("assistant");
    const request = provider.requests[0]!;
    expect(request).toMatchObject({ state: "paused", chunksSent: 1 });

    provider.resumePaused();
    const { events, error } = await reader.rest();
    expect(error).toBeUndefined();
    const chunks = chunksOf([first!, ...events]);
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe("stop");
    expect(await request.done).toBe("done");
    expect(request.chunksSent).toBe(events.length + 1);
  });

  it("pause-after:0 sends the headers and holds every event; resume() on the request lets it go", async () => {
    await using provider = await startFakeProvider();

    const response = await postChat(provider, streamed, { headers: { "x-fake-pause-after": "0" } });

    expect(response.status).toBe(200);
    const request = await provider.waitForRequest((candidate) => candidate.state === "paused");
    expect(request.chunksSent).toBe(0);
    request.resume();
    expect(chunksOf((await new EventReader(response).rest()).events).length).toBeGreaterThan(3);
  });
});

describe("a response that does not finish", () => {
  it("is marked aborted when the client leaves mid-stream, and stops being written", async () => {
    await using provider = await startFakeProvider();
    const abort = new AbortController();
    const response = await postChat(provider, streamed, {
      headers: { "x-fake-pause-after": "2" },
      signal: abort.signal,
    });
    const reader = new EventReader(response);
    await reader.next();
    await reader.next();

    abort.abort();

    const request = provider.requests[0]!;
    expect(await request.done).toBe("aborted");
    expect(request.chunksSent).toBe(2);
  });

  it("is cut by close(), which leaves no request open", async () => {
    const provider = await startFakeProvider();
    const answer = postChat(provider, plain, { headers: { "x-fake-fail": "hang" } });
    const response = await postChat(provider, streamed, { headers: { "x-fake-pause-after": "1" } });
    await provider.waitForRequest((request) => request.state === "paused");

    await provider.close();

    await expect(answer).rejects.toThrow();
    expect((await new EventReader(response).rest()).error).toBeInstanceOf(Error);
    expect(provider.requests.map((request) => request.state)).toEqual(["reset", "reset"]);
  });

  it("x-fake-latency-ms holds the response headers back", async () => {
    await using provider = await startFakeProvider();
    const abort = new AbortController();
    const answer = postChat(provider, plain, {
      headers: { "x-fake-latency-ms": "60000" },
      signal: abort.signal,
    });

    const request = await provider.waitForRequest();
    expect(request.status).toBeUndefined();

    abort.abort();
    await expect(answer).rejects.toThrow();
    expect(await request.done).toBe("aborted");
    expect(request.status).toBeUndefined();
  });
});

describe("x-fake-usage", () => {
  const usage = '{"prompt_tokens": 18446744073709551616, "completion_tokens": -5, "total_tokens": "12"}';

  it("replaces the members of a completion's usage it names, as given", async () => {
    await using provider = await startFakeProvider();
    const response = await postChat(provider, plain, { headers: { "x-fake-usage": usage } });
    const body = (await response.json()) as { usage: Record<string, unknown> };
    expect(body.usage).toMatchObject({ prompt_tokens: 2 ** 64, completion_tokens: -5, total_tokens: "12" });
    expect(body.usage.prompt_tokens_details).toEqual({ cached_tokens: 0, audio_tokens: 0 });
  });

  it("replaces them in a stream's usage chunk too", async () => {
    await using provider = await startFakeProvider();
    const response = await postChat(
      provider,
      { ...streamed, stream_options: { include_usage: true } },
      { headers: { "x-fake-usage": usage } },
    );
    const chunks = chunksOf((await new EventReader(response).rest()).events);
    expect(chunks.at(-1)?.usage).toMatchObject({ completion_tokens: -5, total_tokens: "12" });
  });
});

describe("x-fake-rate-limits", () => {
  const asked = {
    "x-ratelimit-limit-tokens": "18446744073709551616",
    "x-ratelimit-remaining-tokens": "-5",
    "retry-after": "NaN",
  };

  it("sends the rate-limit headers it names over the answer's own", async () => {
    await using provider = await startFakeProvider();
    const response = await postChat(provider, plain, {
      headers: { "x-fake-rate-limits": JSON.stringify(asked) },
    });
    expect(response.status).toBe(200);
    for (const [name, value] of Object.entries(asked)) expect(response.headers.get(name)).toBe(value);
    // The rest of the window is the fake's own.
    expect(response.headers.get("x-ratelimit-limit-requests")).toMatch(/^\d+$/);
  });

  it("sends them on an error too, over its retry-after", async () => {
    await using provider = await startFakeProvider();
    const response = await postChat(provider, plain, {
      headers: { "x-fake-fail": "429", "x-fake-rate-limits": JSON.stringify(asked) },
    });
    expect(response.status).toBe(429);
    expect(response.headers.get("retry-after")).toBe("NaN");
    expect(response.headers.get("x-ratelimit-remaining-tokens")).toBe("-5");
  });
});
