import { waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "./stack.js";

let stack: Stack;
const LIMITED_KEY = "sk-limited-0000000000000000000000";
beforeAll(async () => {
  // Prediction off: these tests see the provider's own answers, 429s included (predict.e2e
  // covers what prediction does with them).
  stack = await startStack({
    config: { predict: { enabled: false } },
    provider: { chunkDelayMs: 2, limitsByKey: { [LIMITED_KEY]: { tpm: 200 } } },
  });
});
afterAll(async () => {
  await stack?.close();
});

const WEATHER_TOOL = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

/** The same request sent straight to the provider, as text: the reference for exactness. */
async function direct(body: unknown, headers: Record<string, string> = {}): Promise<string> {
  const response = await fetch(`${stack.provider.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${API_KEY}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return response.text();
}

// `created` is the provider's clock; everything else in a deterministic reply must match.
const sameExceptClock = (text: string) => text.replace(/"created":\d+/g, '"created":0');

describe("Chat Completions through the gateway with the openai SDK", () => {
  it("returns exactly what the provider returned, and records the call with usage and cost", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "plain-call" } });
    const request = { model: "gpt-4o-mini", messages: [{ role: "user" as const, content: "Say hello" }] };
    const { data, response } = await client.chat.completions.create(request).withResponse();
    expect(data.choices[0]?.message.content).toBe("Fake reply to: Say hello");
    expect(data.usage?.prompt_tokens).toBeGreaterThan(0);
    expect(response.headers.get("x-ratelimit-remaining-requests")).not.toBeNull();

    const viaGateway = await client.chat.completions.create(request).asResponse();
    expect(sameExceptClock(await viaGateway.text())).toBe(sameExceptClock(await direct(request)));

    // The provider saw the client's own credential.
    expect(stack.provider.requests.at(-1)?.headers.authorization).toBe(`Bearer ${API_KEY}`);

    const run = await stack.settled("plain-call", 2);
    expect(run.completed).toBe(2);
    const [step] = run.steps;
    expect(step).toMatchObject({
      status: "completed",
      api: "openai_chat_completions",
      model: "gpt-4o-mini",
      upstreamStatus: 200,
      inputTokens: data.usage?.prompt_tokens,
      outputTokens: data.usage?.completion_tokens,
      usageReported: true,
      finishReason: "stop",
    });
    // gpt-4o-mini: $0.15 / M input, $0.60 / M output.
    const expected = Math.round(
      ((data.usage?.prompt_tokens ?? 0) * 0.15 + (data.usage?.completion_tokens ?? 0) * 0.6) * 1000,
    );
    expect(step?.costNanoUsd).toBe(expected);
    expect(step?.latencyMs).toBeGreaterThanOrEqual(0);
  });

  it("streams the provider's chunks unchanged, meters usage it had to ask for, and hides that chunk", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "streamed" } });
    const request = {
      model: "gpt-4o-mini",
      stream: true as const,
      messages: [{ role: "user" as const, content: "Tell me a short story about a lighthouse keeper" }],
    };
    const raw = await (await client.chat.completions.create(request).asResponse()).text();
    // What the provider sent for the request the gateway forwarded (with usage asked for),
    // minus only the usage-only chunk, which this client did not ask for.
    const upstream = await direct({ ...request, stream_options: { include_usage: true } });
    const events = upstream.split("\n\n").filter((e) => e.length > 0);
    const usageOnly = events.filter((e) => e.includes('"choices":[]'));
    expect(usageOnly).toHaveLength(1);
    const expected = `${events.filter((e) => !usageOnly.includes(e)).join("\n\n")}\n\n`;
    expect(sameExceptClock(raw)).toBe(sameExceptClock(expected));
    expect(raw).not.toContain('"choices":[]');

    // The provider was asked for usage on the client's behalf.
    const sent = stack.provider.requests.at(-1)?.body as { stream_options?: { include_usage?: boolean } };
    expect(sent.stream_options?.include_usage).toBe(true);

    const run = await stack.settled("streamed", 1);
    expect(run.steps[0]).toMatchObject({ status: "completed", stream: true, usageReported: true });
    expect(run.steps[0]?.inputTokens).toBeGreaterThan(0);
    expect(run.steps[0]?.costNanoUsd).toBeGreaterThan(0);
  });

  it("passes the usage chunk through to a client that asked for it", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "wants-usage" } });
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "Count to three" }],
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const usage = chunks.at(-1)?.usage;
    expect(chunks.at(-1)?.choices).toEqual([]);
    const run = await stack.settled("wants-usage", 1);
    expect(run.steps[0]?.inputTokens).toBe(usage?.prompt_tokens);
    expect(run.steps[0]?.outputTokens).toBe(usage?.completion_tokens);
  });

  it("flushes each chunk as it arrives: the client reads the first while the provider is not done", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "flushing", "x-fake-pause-after": "2" } });
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: "one two three four five six" }],
    });
    const iterator = stream[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.done).toBe(false);
    // The provider holds the rest of its answer until told to go on: it cannot have finished.
    const upstream = stack.provider.requests.at(-1)!;
    expect(["open", "paused"]).toContain(upstream.state);
    await waitFor(() => upstream.state === "paused", { timeoutMs: 5_000, message: "provider never paused" });
    upstream.resume();
    let count = 1;
    while (!(await iterator.next()).done) count += 1;
    expect(count).toBeGreaterThan(3);
    expect((await stack.settled("flushing", 1)).steps[0]?.status).toBe("completed");
  });

  it("returns tool calls, streamed or not, and records which tools were called", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "tools" } });
    const messages = [{ role: "user" as const, content: 'Weather? [[call:get_weather {"city":"Paris"}]]' }];
    const done = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages,
      tools: [WEATHER_TOOL],
    });
    const call = done.choices[0]?.message.tool_calls?.[0];
    expect(call?.type === "function" && call.function.name).toBe("get_weather");
    expect(call?.type === "function" && JSON.parse(call.function.arguments)).toEqual({ city: "Paris" });
    expect(done.choices[0]?.finish_reason).toBe("tool_calls");

    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages,
      tools: [WEATHER_TOOL],
      stream: true,
    });
    let args = "";
    for await (const chunk of stream)
      args += chunk.choices[0]?.delta.tool_calls?.[0]?.function?.arguments ?? "";
    expect(JSON.parse(args)).toEqual({ city: "Paris" });

    const run = await stack.settled("tools", 2);
    expect(run.steps.map((s) => [s.toolCalls, s.finishReason])).toEqual([
      [["get_weather"], "tool_calls"],
      [["get_weather"], "tool_calls"],
    ]);
  });

  it.each([
    [400, OpenAI.BadRequestError, { "x-fake-fail": "400" }, undefined],
    [401, OpenAI.AuthenticationError, {}, "sk-bad-key-000000001234"],
    [500, OpenAI.InternalServerError, { "x-fake-fail": "500" }, undefined],
  ])("passes a %i through unchanged and records it", async (status, ErrorClass, headers, apiKey) => {
    const runId = `error-${status}`;
    const client = stack.client({ apiKey, headers: { "X-Holdfast-Run": runId, ...headers } });
    const request = { model: "gpt-4o-mini", messages: [{ role: "user" as const, content: "hi" }] };
    const error = await client.chat.completions.create(request).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ErrorClass);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(status);
    const expectedBody = JSON.parse(
      await direct(request, { ...headers, ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) }),
    );
    expect((error as InstanceType<typeof OpenAI.APIError>).error).toEqual(expectedBody.error);
    const run = await stack.settled(runId, 1);
    expect(run.steps[0]).toMatchObject({ status: "failed", upstreamStatus: status, costNanoUsd: 0 });
    expect(run.steps[0]?.failure?.reason).toBe("upstream_status");
  });

  it("with prediction off, passes a 429 through with retry-after and the rate-limit headers, and records it", async () => {
    const client = stack.client({ apiKey: LIMITED_KEY, headers: { "X-Holdfast-Run": "limited" } });
    const request = {
      model: "gpt-4o-mini",
      max_tokens: 50,
      messages: [{ role: "user" as const, content: "x".repeat(400) }],
    };
    await client.chat.completions.create(request);
    const error = (await client.chat.completions.create(request).catch((e: unknown) => e)) as InstanceType<
      typeof OpenAI.APIError
    >;
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect(error.status).toBe(429);
    expect(Number(error.headers?.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(error.headers?.get("x-ratelimit-remaining-tokens")).not.toBeNull();
    expect(error.code).toBe("rate_limit_exceeded");
    const run = await stack.settled("limited", 2);
    expect(run.steps.map((s) => s.upstreamStatus)).toEqual([200, 429]);
    expect(run.steps[1]?.failure).toMatchObject({
      reason: "upstream_status",
      errorCode: "rate_limit_exceeded",
    });
  });

  it("stops the upstream call of a client that leaves before the provider answers, and records it", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "left-early", "x-fake-latency-ms": "5000" } });
    const abort = new AbortController();
    const before = stack.provider.requests.length;
    const call = client.chat.completions.create(
      { model: "gpt-4o-mini", messages: [{ role: "user", content: "take your time" }] },
      { signal: abort.signal, maxRetries: 0 },
    );
    call.catch(() => undefined);
    const upstream = await waitFor(() => stack.provider.requests[before], {
      timeoutMs: 5_000,
      message: "the call never reached the provider",
    });
    abort.abort();
    await expect(call).rejects.toThrow(/abort/i);
    expect(await upstream.done).toBe("aborted");
    const run = await stack.settled("left-early", 1);
    expect(run.steps[0]?.status).toBe("failed");
    expect(run.steps[0]?.failure?.reason).toBe("client_aborted");
  });

  it("records a client that gives up mid-stream, stops the upstream call, and keeps serving", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "abandoned", "x-fake-pause-after": "2" } });
    const abort = new AbortController();
    const stream = await client.chat.completions.create(
      { model: "gpt-4o-mini", stream: true, messages: [{ role: "user", content: "a long answer please" }] },
      { signal: abort.signal },
    );
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    abort.abort();
    const upstream = stack.provider.requests.at(-1)!;
    expect(await upstream.done).toBe("aborted");
    const run = await stack.settled("abandoned", 1);
    expect(run.steps[0]?.status).toBe("failed");
    expect(run.steps[0]?.failure?.reason).toBe("client_aborted");
    // The gateway is still fine.
    const next = await stack.client().chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "still there?" }],
    });
    expect(next.choices[0]?.message.content).toContain("still there?");
  });

  it("ends the client's stream with an error when the provider resets mid-stream, and records it", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "reset", "x-fake-fail": "reset-after:2" } });
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: "this will break" }],
    });
    const received: unknown[] = [];
    const outcome = await (async () => {
      for await (const chunk of stream) received.push(chunk);
    })().catch((e: unknown) => e);
    expect(outcome).toBeInstanceOf(OpenAI.APIError);
    expect(received.length).toBeGreaterThanOrEqual(1);
    const run = await stack.settled("reset", 1);
    expect(run.steps[0]?.failure?.reason).toBe("upstream_reset");
  });

  it("keeps two concurrent runs apart", async () => {
    const ask = (runId: string, i: number) =>
      stack.client({ headers: { "X-Holdfast-Run": runId } }).chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: `${runId} ${i}` }],
      });
    await Promise.all(Array.from({ length: 10 }, (_, i) => [ask("agent-a", i), ask("agent-b", i)]).flat());
    const [a, b] = await Promise.all([stack.settled("agent-a", 10), stack.settled("agent-b", 10)]);
    expect(a.steps.map((s) => s.step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(b.steps.map((s) => s.step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(a.completed + b.completed).toBe(20);
    expect(new Set([...a.steps, ...b.steps].map((s) => s.stepId)).size).toBe(20);
  });

  it("answers an unreachable provider with a 502 in the provider's shape, and records it", async () => {
    const dead = await stack.extraGateway({ upstream: "http://127.0.0.1:9/v1" });
    const error = (await dead
      .client({ "X-Holdfast-Run": "no-provider" })
      .chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(error.status).toBe(502);
    expect(error.error).toMatchObject({ type: "server_error", code: "upstream_unreachable" });
    const run = await stack.settled("no-provider", 1);
    expect(run.steps[0]?.failure?.reason).toBe("upstream_unreachable");
  });

  it("passes other provider paths through unmetered, so nothing else an SDK does breaks", async () => {
    const before = (await stack.bus.streamState()).lastSeq;
    const models = await stack.client().models.list();
    expect(models.data.map((m) => m.id)).toContain("gpt-4o-mini");
    expect(stack.provider.requests.at(-1)?.path).toBe("/v1/models");
    expect((await stack.bus.streamState()).lastSeq).toBe(before);
  });

  it("carries the run's tenant on every event, and its usage and cost into ClickHouse", async () => {
    const client = stack.client({
      headers: { "X-Holdfast-Run": "tenant-call", "X-Holdfast-Tenant": "acme" },
    });
    const answer = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "Whose call is this?" }],
    });
    // The tenant's run: its id is scoped by the tenant.
    const run = await stack.settled("acme/tenant-call", 1);
    const events = (await stack.bus.readRun("acme/tenant-call")).events.map((e) => e.envelope);
    expect(events.map((e) => e.tenant)).toEqual(events.map(() => "acme"));
    await expect
      .poll(
        async () =>
          (
            await stack.sql<Record<string, string | number>>(
              "SELECT tenant, input_tokens, output_tokens, toString(cost_usd) AS cost FROM steps WHERE run_id = 'acme/tenant-call'",
            )
          ).map((row) => ({
            ...row,
            input_tokens: Number(row.input_tokens),
            output_tokens: Number(row.output_tokens),
          })),
        { timeout: 10_000 },
      )
      .toEqual([
        {
          tenant: "acme",
          input_tokens: answer.usage?.prompt_tokens,
          output_tokens: answer.usage?.completion_tokens,
          cost: String(run.steps[0]!.costNanoUsd! / 1e9),
        },
      ]);
  });

  it("makes every finished call exactly one row in ClickHouse", async () => {
    // Count outcome events in JetStream, independently of the projection.
    let outcomes = 0;
    for (const type of ["StepCompleted", "StepFailed"] as const) {
      const counts = await stack.bus.subjectCounts(stack.bus.subjects.ofType(type));
      outcomes += [...counts.values()].reduce((sum, n) => sum + n, 0);
    }
    expect(outcomes).toBeGreaterThan(20);
    await expect
      .poll(async () => (await stack.sql<{ n: number }>("SELECT count() AS n FROM steps"))[0]?.n, {
        timeout: 10_000,
      })
      .toBe(outcomes);
    const [distinct] = await stack.sql<{ n: number }>("SELECT uniqExact(step_id) AS n FROM steps");
    expect(distinct?.n).toBe(outcomes);
  });
});
