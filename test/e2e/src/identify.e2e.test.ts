import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

let stack: Stack;
// A short idle window, so the idle split of a fingerprinted agent is observable in a test.
const IDLE_MS = 1_500;
beforeAll(async () => {
  stack = await startStack({ config: { identification: { idle_minutes: IDLE_MS / 60_000 } } });
});
afterAll(async () => {
  await stack?.close();
});

async function call(options: {
  headers?: Record<string, string>;
  body?: Record<string, unknown>;
  messages?: unknown[];
}) {
  const response = await fetch(`${stack.gatewayUrl}/chat/completions`, {
    method: "POST",
    headers: {
      authorization: "Bearer sk-test-identify",
      "content-type": "application/json",
      ...options.headers,
    },
    body: JSON.stringify({
      model: "gpt-4o-mini",
      messages: options.messages ?? [{ role: "user", content: "hello" }],
      ...options.body,
    }),
  });
  expect(response.status).toBe(200);
  await response.text();
}

/** The run the last StepStarted in the log belongs to, and how it was identified. */
async function lastRun(): Promise<{ runId: string; source: string; key: string; tag: string }> {
  let subject: string | undefined;
  for await (const stored of stack.bus.allMessages()) {
    if (stored.subject.endsWith(".StepStarted")) subject = stored.subject;
  }
  if (subject === undefined) throw new Error("no StepStarted in the log");
  const runId = stack.bus.subjects.runIdOf(subject);
  const state = await stack.run(runId);
  return {
    runId,
    source: state.identifiedBy?.source ?? "",
    key: state.identifiedBy?.key ?? "",
    tag: state.tag,
  };
}

describe("run identification, first match wins", () => {
  it.each(["X-Holdfast-Run", "X-Run-Id", "X-Session-Id", "X-Conversation-Id"])(
    "names the run by header %s",
    async (header) => {
      const runId = `by-${header.toLowerCase()}`;
      await call({ headers: { [header]: runId } });
      expect(await lastRun()).toMatchObject({ runId, source: "header", key: header });
    },
  );

  it.each(["run_id", "session_id", "conversation_id", "thread_id", "trace_id"])(
    "names the run by body field metadata.%s",
    async (field) => {
      const runId = `by-metadata-${field}`;
      await call({ body: { metadata: { [field]: runId } } });
      expect(await lastRun()).toMatchObject({ runId, source: "body", key: `metadata.${field}` });
    },
  );

  it("names the run by the trace id of a W3C traceparent", async () => {
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    await call({ headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } });
    expect(await lastRun()).toMatchObject({ runId: traceId, source: "traceparent" });
  });

  it("prefers a header over a body field over a traceparent", async () => {
    await call({
      headers: {
        "X-Run-Id": "header-wins",
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4737-00f067aa0ba902b7-01",
      },
      body: { metadata: { run_id: "body-loses" } },
    });
    expect((await lastRun()).runId).toBe("header-wins");
    await call({
      headers: { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4738-00f067aa0ba902b7-01" },
      body: { metadata: { session_id: "body-wins" } },
    });
    expect((await lastRun()).runId).toBe("body-wins");
    await call({ headers: { "X-Holdfast-Run": "first-header", "X-Session-Id": "second-header" } });
    expect((await lastRun()).runId).toBe("first-header");
  });

  it("takes the tag from X-Holdfast-Tag or metadata.tag", async () => {
    await call({ headers: { "X-Holdfast-Run": "tagged-h", "X-Holdfast-Tag": "prod" } });
    expect(await lastRun()).toMatchObject({ runId: "tagged-h", tag: "prod" });
    await call({ headers: { "X-Holdfast-Run": "tagged-b" }, body: { metadata: { tag: "staging" } } });
    expect(await lastRun()).toMatchObject({ runId: "tagged-b", tag: "staging" });
  });

  it("keeps runs with awkward ids apart and whole", async () => {
    const inHeaders = ["a.b", "a", "a.*", "orders.>", "with space", "_YQ"];
    const inBodies = ["ünïcödé", "🚀 run", "a.b.c", ">"];
    for (const id of inHeaders) await call({ headers: { "X-Holdfast-Run": id } });
    for (const id of inBodies) await call({ body: { metadata: { run_id: id } } });
    for (const id of [...inHeaders, ...inBodies]) {
      const run = await stack.settled(id, 1);
      expect(run.runId).toBe(id);
      expect(run.steps).toHaveLength(1);
    }
  });

  it("fingerprints an agent that names nothing, and splits it into generations", async () => {
    const system = { role: "system", content: "You are the nightly report agent." };
    const first = { role: "user", content: "Compile the report." };
    const loop = [system, first];
    await call({ messages: loop });
    const gen1 = await lastRun();
    expect(gen1.source).toBe("fingerprint");
    expect(gen1.runId).toMatch(/^fp-[0-9a-f]{16}-1$/);

    // The loop grows: same run.
    await call({
      messages: [...loop, { role: "assistant", content: "Working." }, { role: "user", content: "Go on." }],
    });
    expect((await lastRun()).runId).toBe(gen1.runId);

    // Fewer messages than last time: a new invocation, the next generation.
    await call({ messages: loop });
    const gen2 = await lastRun();
    expect(gen2.runId).toBe(gen1.runId.replace(/-1$/, "-2"));

    // Silence longer than idle_minutes: another generation.
    await stack.settled(gen2.runId, 1);
    await new Promise((resolve) => setTimeout(resolve, IDLE_MS + 300));
    await call({ messages: [...loop, { role: "user", content: "more" }] });
    expect((await lastRun()).runId).toBe(gen1.runId.replace(/-1$/, "-3"));

    // A different system prompt is a different agent.
    await call({ messages: [{ role: "system", content: "Another agent." }, first] });
    expect((await lastRun()).runId).not.toMatch(new RegExp(gen1.runId.slice(0, 19)));
  });
});

describe("bad input", () => {
  const forwarded = () => stack.provider.requests.length;

  it("answers invalid JSON with a 400 in OpenAI's shape and forwards nothing", async () => {
    const before = forwarded();
    const response = await fetch(`${stack.gatewayUrl}/chat/completions`, {
      method: "POST",
      headers: { authorization: "Bearer sk-x", "content-type": "application/json" },
      body: '{"model": "gpt-4o-mini", "messages": [',
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message).toMatch(/could not parse the JSON body/);
    expect(forwarded()).toBe(before);
  });

  it("answers a body that is not a chat request with a 400 naming the field", async () => {
    const before = forwarded();
    const response = await fetch(`${stack.gatewayUrl}/chat/completions`, {
      method: "POST",
      headers: { authorization: "Bearer sk-x", "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: "not a list" }),
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { param: string } }).error.param).toBe("messages");
    expect(forwarded()).toBe(before);
  });

  it("answers an oversized body with a 413 in OpenAI's shape and forwards nothing", async () => {
    const before = forwarded();
    const huge = "x".repeat(stack.config.gateway.max_body_bytes + 1);
    const response = await fetch(`${stack.gatewayUrl}/chat/completions`, {
      method: "POST",
      headers: { authorization: "Bearer sk-x", "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: huge }] }),
    });
    expect(response.status).toBe(413);
    const body = (await response.json()) as { error: { type: string; code: string } };
    expect(body.error).toMatchObject({ type: "invalid_request_error", code: "request_too_large" });
    expect(forwarded()).toBe(before);
  });

  it("refuses a run id it cannot accept, saying where it came from", async () => {
    const response = await fetch(`${stack.gatewayUrl}/chat/completions`, {
      method: "POST",
      headers: {
        authorization: "Bearer sk-x",
        "content-type": "application/json",
        "X-Run-Id": "r".repeat(300),
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { message: string } }).error.message).toMatch(
      /header X-Run-Id.*300/,
    );
  });

  it("keeps what was already recorded when bad input arrives", async () => {
    const before = await stack.run("tagged-h");
    await fetch(`${stack.gatewayUrl}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "X-Holdfast-Run": "tagged-h" },
      body: "{broken",
    });
    expect(await stack.run("tagged-h")).toEqual(before);
  });
});
