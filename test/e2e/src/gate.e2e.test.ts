import { spawn } from "node:child_process";
import Anthropic from "@anthropic-ai/sdk";
import { type RunningControl, startControl } from "@holdfast/control";
import type { GateView } from "@holdfast/events";
import type { FakeRequest } from "@holdfast/fake-provider";
import { createLogger } from "@holdfast/log";
import { ensurePythonHttpx, waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, sleep, startStack, stillPending } from "./stack.js";

// The tool-call gate through the official SDKs: an answer asking for a gated tool is
// metered and recorded, then held before the agent sees it, until an operator approves
// (the exact answer is delivered) or denies it (the SDK raises), through the control API
// on the same log. Rules: delete_* always; send_email unless to example.com; on runs tagged
// "strict", on_match: stop; the same tool calls three times in a row is a loop.
let stack: Stack;
let control: RunningControl;
const TOKEN = "control-token-for-gate-tests-0123456789";
const STRICT = "strict";

beforeAll(async () => {
  stack = await startStack({
    config: {
      hold: { keepalive_ms: 1_000 },
      tool_gate: { deny: [{ name: "delete_*" }, { name: "send_email", args: "@(?!example\\.com)" }] },
      tool_gate_by_tag: { [STRICT]: { on_match: "stop" } },
      max_repeated_tool_calls: 3,
      redact: { patterns: ["\\b\\d{4}-\\d{4}-\\d{4}-\\d{4}\\b"] },
    },
    provider: { chunkDelayMs: 1 },
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

/** `holdfast approve|deny <run>` as the CLI sends it: the control REST API with the control token. */
async function decide(
  decision: "approve" | "deny",
  runId: string,
  body: Record<string, string> = {},
): Promise<{ status: number; body: { run?: { status: string }; gates?: { decision: string }[] } }> {
  const response = await fetch(`${control.url}/runs/${encodeURIComponent(runId)}/${decision}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as never };
}

/** Resolves with the run's held answer once the gate has recorded it. */
const gated = (runId: string, count = 1): Promise<GateView> =>
  waitFor(
    async () => {
      const pending = (await stack.run(runId)).gates.filter((gate) => gate.status === "pending");
      return pending.length >= count ? pending.at(-1) : undefined;
    },
    { timeoutMs: 15_000, message: `no answer of ${runId} was held by the gate` },
  );

const chatTool = (name: string) => ({
  type: "function" as const,
  function: { name, parameters: { type: "object", properties: {} } },
});
const responsesTool = (name: string) => ({
  type: "function" as const,
  name,
  parameters: { type: "object", properties: {} },
  strict: false,
});
const anthropicTool = (name: string) => ({ name, input_schema: { type: "object" as const, properties: {} } });

const client = (runId: string, extra: Partial<ConstructorParameters<typeof OpenAI>[0]> = {}) =>
  new OpenAI({
    apiKey: API_KEY,
    baseURL: stack.gatewayUrl,
    maxRetries: 0,
    timeout: 30_000,
    defaultHeaders: { "X-Holdfast-Run": runId },
    ...extra,
  });
const anthropic = (runId: string) =>
  new Anthropic({
    apiKey: API_KEY,
    baseURL: new URL(stack.gatewayUrl).origin,
    maxRetries: 0,
    timeout: 30_000,
    defaultHeaders: { "X-Holdfast-Run": runId },
  });

/**
 * The provider's latest request whose body names this run (Holdfast's own headers are not
 * forwarded, so each test puts its run id in the prompt), once its answer is out.
 */
/**
 * A call expected to fail, its failure marked handled at once: the answer may be refused
 * while the test is still deciding on the gate, before `expect(...).rejects` looks at it.
 */
function rejecting<T>(call: PromiseLike<T> | (() => Promise<T>)): Promise<T> {
  const promise = typeof call === "function" ? call() : Promise.resolve(call);
  promise.catch(() => undefined);
  return promise;
}

async function lastProviderExchange(runId: string): Promise<FakeRequest> {
  const exchange = stack.provider.requests.findLast((r) => r.rawBody.includes(runId));
  if (exchange === undefined) throw new Error(`the provider never saw a call of ${runId}`);
  await exchange.done;
  return exchange;
}

/** A streamed Responses call of the run, read whole as the client gets it (no SDK between). */
async function responsesStream(runId: string, input: string, tools: unknown[]): Promise<string> {
  const response = await fetch(`${stack.gatewayUrl}/responses`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${API_KEY}`,
      "content-type": "application/json",
      "x-holdfast-run": runId,
    },
    body: JSON.stringify({ model: "gpt-4o-mini", stream: true, input, tools }),
  });
  return response.text();
}

/** Each event's data of an SSE body, parsed (keepalive comments left out). */
function sseData(text: string): Record<string, unknown>[] {
  return text
    .split(/\n\n/)
    .map((block) =>
      block
        .split("\n")
        .filter((line) => line.startsWith("data: "))
        .map((line) => line.slice("data: ".length))
        .join("\n"),
    )
    .filter((data) => data !== "")
    .map((data) => JSON.parse(data) as Record<string, unknown>);
}

/** `holdfast hold|stop <run>` as the CLI sends it: the control REST API with the control token. */
async function act(action: "hold" | "stop", runId: string): Promise<void> {
  const response = await fetch(`${control.url}/runs/${encodeURIComponent(runId)}/${action}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ reason: "test" }),
  });
  expect(response.status).toBe(200);
}

/** An SSE body without the comments (each its own event) a held stream gets as keepalives. */
const withoutComments = (text: string) => text.replace(/^:.*\n\n/gm, "");

describe("an answer asking for a gated tool is held until an operator decides", () => {
  it("holds a Chat Completions answer, shows what the model asked for, and approve delivers exactly the provider's answer", async () => {
    const runId = "gate-chat-approve";
    const answer = client(runId).chat.completions.create({
      model: "gpt-4o-mini",
      messages: [
        {
          role: "user",
          content:
            'gate-chat-approve: clean up [[call:delete_repo {"name":"prod-db","card":"4111-1111-1111-1111"}]]',
        },
      ],
      tools: [chatTool("delete_repo")],
    });
    const held = await gated(runId);
    expect(held).toMatchObject({
      kind: "gate",
      step: 1,
      tool: "delete_repo",
      rule: "tool_gate.deny[0]",
      ruleText: "delete_*",
      action: "hold",
    });
    // Recorded with the configured redaction applied; the request is named by its hash.
    expect(held.arguments).toBe('{"name":"prod-db","card":"[redacted]"}');
    expect(held.requestHash).toMatch(/^[0-9a-f]{64}$/);
    const run = await stack.run(runId);
    expect(run.status).toBe("held");
    // Metered and recorded first: the step is complete and charged before anyone decides.
    expect(run.steps).toEqual([expect.objectContaining({ status: "completed", toolCalls: ["delete_repo"] })]);
    expect(run.steps[0]!.outputTokens).toBeGreaterThan(0);
    const gatedAt = run.control.find((c) => c.what === "gated")!;
    expect(gatedAt.sequence).toBeGreaterThan(run.lastSequence - 1);
    expect(await stillPending(answer, 1_500)).toBe(true);

    const approved = await decide("approve", runId, { reason: "the test says so" });
    expect(approved).toMatchObject({
      status: 200,
      body: { run: { status: "idle" }, gates: [{ decision: "approved" }] },
    });
    const result = await answer;
    const sent = await lastProviderExchange(runId);
    expect(JSON.parse(JSON.stringify(result))).toEqual(JSON.parse(sent.responseBody));
    const after = await stack.run(runId);
    expect(after.gates[0]).toMatchObject({ status: "approved", decisionReason: "the test says so" });
    expect(after.status).toBe("idle");
  });

  it("holds a stream before its terminating [DONE], past the SDK's own timeout, and approve delivers every event unchanged", async () => {
    const runId = "gate-chat-stream";
    const response = fetch(`${stack.gatewayUrl}/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${API_KEY}`,
        "content-type": "application/json",
        "x-holdfast-run": runId,
      },
      body: JSON.stringify({
        model: "gpt-4o-mini",
        stream: true,
        stream_options: { include_usage: true },
        messages: [
          {
            role: "user",
            content:
              'gate-chat-stream: go [[call:read_file {"path":"a"}]] [[call:delete_all {"force":true}]]',
          },
        ],
        tools: [chatTool("read_file"), chatTool("delete_all")],
      }),
    });
    // Two parallel tool calls, spread over many deltas: the second is the gated one.
    const held = await gated(runId);
    expect(held.tool).toBe("delete_all");
    expect(held.toolCalls.map((call) => call.name)).toEqual(["read_file", "delete_all"]);
    const reader = (await response).body!.getReader();
    const decoder = new TextDecoder();
    let text = "";
    const readAll = (async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return text;
        text += decoder.decode(value, { stream: true });
      }
    })();
    await sleep(2_500);
    // The chunks came through as they arrived; the terminating frame did not.
    expect(text).toContain('"delete_all"');
    expect(text).not.toContain("[DONE]");
    expect(text).toContain(": holdfast: held");
    await decide("approve", runId);
    const body = await readAll;
    expect(withoutComments(body)).toBe((await lastProviderExchange(runId)).responseBody);

    // The SDK, with a 1.5 s timeout: a held stream outlives it.
    const sdkRun = "gate-chat-stream-sdk";
    const stream = await client(sdkRun, { timeout: 1_500 }).chat.completions.create({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: '[[call:delete_repo {"name":"x"}]]' }],
      tools: [chatTool("delete_repo")],
    });
    const collected = (async () => {
      const names: string[] = [];
      for await (const chunk of stream) {
        for (const call of chunk.choices[0]?.delta.tool_calls ?? []) {
          if (call.function?.name) names.push(call.function.name);
        }
      }
      return names;
    })();
    await gated(sdkRun);
    await sleep(2_500);
    await decide("approve", sdkRun);
    expect(await collected).toEqual(["delete_repo"]);
  });

  it("keeps Python's httpx waiting past its own timeout on a held non-streaming answer", async () => {
    const python = await ensurePythonHttpx();
    const runId = "gate-python";
    const script = `
import httpx, json, sys
r = httpx.post(sys.argv[1], timeout=1.5, headers={"authorization": "Bearer ${API_KEY}", "x-holdfast-run": "${runId}"},
               json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "[[call:delete_repo]]"}],
                     "tools": [{"type": "function", "function": {"name": "delete_repo", "parameters": {"type": "object"}}}]})
print(json.dumps({"status": r.status_code, "tool": r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"]}))
`;
    const child = spawn(python.python, ["-c", script, `${stack.gatewayUrl}/chat/completions`], {
      env: { ...process.env, PYTHONPATH: python.pythonPath },
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      err += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    await gated(runId);
    await sleep(3_500);
    expect(child.exitCode, err).toBeNull();
    await decide("approve", runId);
    expect(await exited, err).toBe(0);
    expect(JSON.parse(out)).toEqual({ status: 200, tool: "delete_repo" });
  });

  it("gates one recipient and lets another through, by a regex over the arguments", async () => {
    const runId = "gate-recipients";
    const openai = client(runId);
    const ask = (to: string) =>
      openai.chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: `[[call:send_email {"to":"${to}","body":"hi"}]]` }],
        tools: [chatTool("send_email")],
      });
    const internal = await ask("ops@example.com");
    expect(internal.choices[0]!.message.tool_calls?.[0]).toMatchObject({ function: { name: "send_email" } });
    expect((await stack.settled(runId, 1)).gates).toEqual([]);

    const external = rejecting(ask("ceo@rival.io"));
    const held = await gated(runId);
    expect(held).toMatchObject({
      tool: "send_email",
      arguments: '{"to":"ceo@rival.io","body":"hi"}',
      rule: "tool_gate.deny[1]",
      ruleText: "send_email, args /@(?!example\\.com)/u",
    });
    expect(await decide("deny", runId, { reason: "not to a rival" })).toMatchObject({
      status: 200,
      body: { run: { status: "idle" }, gates: [{ decision: "denied" }] },
    });
    const error = await external.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect((error as Error).message).toContain("not to a rival");
    // The run goes on: the next answer is delivered.
    const next = await ask("ops@example.com");
    expect(next.choices[0]!.finish_reason).toBe("tool_calls");
  });

  it("deny makes each SDK raise: Responses (non-streaming and streaming) and Anthropic Messages (streaming)", async () => {
    const runId = "gate-deny-shapes";
    const openai = client(runId);
    const responses = rejecting(
      openai.responses.create({
        model: "gpt-4o-mini",
        input: "[[call:delete_repo]]",
        tools: [responsesTool("delete_repo")],
      }),
    );
    await gated(runId);
    await decide("deny", runId, { reason: "no" });
    await expect(responses).rejects.toBeInstanceOf(OpenAI.PermissionDeniedError);

    const streamRun = "gate-deny-responses-stream";
    const events: string[] = [];
    const streamed = rejecting(async () => {
      const stream = await client(streamRun).responses.create({
        model: "gpt-4o-mini",
        stream: true,
        input: '[[call:delete_repo {"name":"a"}]]',
        tools: [responsesTool("delete_repo")],
      });
      for await (const event of stream) events.push(event.type);
    });
    await gated(streamRun);
    await decide("deny", streamRun, { reason: "no" });
    await expect(streamed).rejects.toThrow(/denied/);
    expect(events).toContain("response.function_call_arguments.done");
    expect(events).not.toContain("response.completed");

    const messagesRun = "gate-deny-messages-stream";
    const claude = rejecting(async () => {
      const stream = anthropic(messagesRun).messages.stream({
        model: "claude-sonnet-4-5",
        max_tokens: 256,
        messages: [{ role: "user", content: '[[call:delete_repo {"name":"b"}]]' }],
        tools: [anthropicTool("delete_repo")],
      });
      return stream.finalMessage();
    });
    await gated(messagesRun);
    await decide("deny", messagesRun, { reason: "no" });
    await expect(claude).rejects.toThrow(/denied/);
  });

  it("approve delivers exactly the provider's answer on Responses (streaming) and Anthropic Messages (non-streaming)", async () => {
    const runId = "gate-approve-responses";
    const stream = client(runId).responses.stream({
      model: "gpt-4o-mini",
      input: 'gate-approve-responses [[call:delete_repo {"name":"c"}]]',
      tools: [responsesTool("delete_repo")],
    });
    const final = stream.finalResponse();
    await gated(runId);
    await decide("approve", runId);
    const response = await final;
    expect(response.output).toEqual([
      expect.objectContaining({ type: "function_call", name: "delete_repo" }),
    ]);
    const sent = (await lastProviderExchange(runId)).responseBody;
    expect(sent).toContain(`"id":"${response.id}"`);

    const messagesRun = "gate-approve-messages";
    const message = anthropic(messagesRun).messages.create({
      model: "claude-sonnet-4-5",
      max_tokens: 256,
      messages: [{ role: "user", content: 'gate-approve-messages [[call:delete_repo {"name":"d"}]]' }],
      tools: [anthropicTool("delete_repo")],
    });
    const held = await gated(messagesRun);
    expect(held.arguments).toBe('{"name":"d"}');
    await decide("approve", messagesRun);
    expect(JSON.parse(JSON.stringify(await message))).toEqual(
      JSON.parse((await lastProviderExchange(messagesRun)).responseBody),
    );
  });

  it("covers the other halves: deny on a Chat Completions stream and an Anthropic message, approve on a Responses answer and an Anthropic stream", async () => {
    const chatRun = "gate-deny-chat-stream";
    const chatEvents: string[] = [];
    const chatStream = rejecting(async () => {
      const stream = await client(chatRun).chat.completions.create({
        model: "gpt-4o-mini",
        stream: true,
        messages: [{ role: "user", content: "[[call:delete_repo]]" }],
        tools: [chatTool("delete_repo")],
      });
      for await (const chunk of stream) chatEvents.push(chunk.choices[0]?.finish_reason ?? "delta");
    });
    await gated(chatRun);
    await decide("deny", chatRun, { reason: "no" });
    await expect(chatStream).rejects.toThrow(/the model's call to "delete_repo" was denied: no/);
    expect(chatEvents).toContain("tool_calls");

    const claudeRun = "gate-deny-messages";
    const claude = rejecting(
      anthropic(claudeRun).messages.create({
        model: "claude-sonnet-4-5",
        max_tokens: 256,
        messages: [{ role: "user", content: "[[call:delete_repo]]" }],
        tools: [anthropicTool("delete_repo")],
      }),
    );
    await gated(claudeRun);
    await decide("deny", claudeRun, { reason: "no" });
    await expect(claude).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);

    const responsesRun = "gate-approve-responses-plain";
    const response = client(responsesRun).responses.create({
      model: "gpt-4o-mini",
      input: `${responsesRun} [[call:delete_repo {"name":"e"}]]`,
      tools: [responsesTool("delete_repo")],
    });
    await gated(responsesRun);
    await decide("approve", responsesRun);
    expect(JSON.parse(JSON.stringify(await response))).toMatchObject(
      JSON.parse((await lastProviderExchange(responsesRun)).responseBody),
    );

    const claudeStreamRun = "gate-approve-messages-stream";
    const final = anthropic(claudeStreamRun)
      .messages.stream({
        model: "claude-sonnet-4-5",
        max_tokens: 256,
        messages: [{ role: "user", content: '[[call:delete_repo {"name":"f"}]]' }],
        tools: [anthropicTool("delete_repo")],
      })
      .finalMessage();
    await gated(claudeStreamRun);
    await decide("approve", claudeStreamRun);
    expect((await final).content).toEqual([
      expect.objectContaining({ type: "tool_use", name: "delete_repo", input: { name: "f" } }),
    ]);
  });

  it("numbers each event it writes into a Responses stream after the provider's last (sequence_number): a denial, a stop", async () => {
    // A denial, after the provider's events up to the held response.completed.
    const denied = "gate-deny-responses-numbered";
    const raw = responsesStream(denied, '[[call:delete_repo {"name":"g"}]]', [responsesTool("delete_repo")]);
    await gated(denied);
    await decide("deny", denied, { reason: "not that repo" });
    const events = sseData(await raw);
    // Each event the client got has its number, one after another from 0, the gateway's error last.
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.map((e) => e.type)).toContain("response.function_call_arguments.done");
    expect(events.at(-1)).toMatchObject({
      type: "error",
      code: "tool_call_denied",
      error: { code: "tool_call_denied", message: expect.stringMatching(/denied: not that repo/) },
    });

    // A stop while the stream is held: no event of the provider's yet, so the error is the first, 0.
    const stopped = "gate-stop-responses-numbered";
    await act("hold", stopped);
    const parked = responsesStream(stopped, "hello", []);
    await waitFor(async () => ((await stack.run(stopped)).parked > 0 ? true : undefined), {
      timeoutMs: 10_000,
      message: "the stream was not parked",
    });
    await act("stop", stopped);
    expect(sseData(await parked)).toEqual([
      expect.objectContaining({ type: "error", sequence_number: 0, code: "run_stopped" }),
    ]);
  });

  it("on_match: stop stops the run at once: its other calls get 409 while the answer waits, and it stays stopped after a deny", async () => {
    const runId = "gate-strict";
    const openai = client(runId, { defaultHeaders: { "X-Holdfast-Run": runId, "X-Holdfast-Tag": STRICT } });
    const answer = rejecting(
      openai.chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "[[call:delete_repo]]" }],
        tools: [chatTool("delete_repo")],
      }),
    );
    const held = await gated(runId);
    expect(held.action).toBe("stop");
    expect((await stack.run(runId)).status).toBe("stopped");
    await expect(
      openai.chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "meanwhile" }],
      }),
    ).rejects.toBeInstanceOf(OpenAI.ConflictError);
    await decide("deny", runId, { reason: "never" });
    await expect(answer).rejects.toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect((await stack.run(runId)).status).toBe("stopped");
  });

  it("an approval or denial with nothing held is refused, and a resume of a gated run says to approve or deny", async () => {
    const runId = "gate-nothing";
    await client(runId).chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "hi" }],
    });
    await stack.settled(runId, 1);
    const nothing = await decide("approve", runId);
    expect(nothing.status).toBe(409);
    expect(JSON.stringify(nothing.body)).toContain("no answer held by the tool-call gate");
    expect((await decide("deny", "never-ran")).status).toBe(404);

    const answer = client(runId).chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "[[call:delete_repo]]" }],
      tools: [chatTool("delete_repo")],
    });
    await gated(runId);
    const resumed = await fetch(`${control.url}/runs/${runId}/resume`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: "{}",
    });
    expect(resumed.status).toBe(409);
    expect(await resumed.text()).toContain("approve or deny");
    await decide("approve", runId);
    await answer;
  });
});

describe("an answer nobody is left to take", () => {
  it("is abandoned when its client goes away: recorded, and the run goes on", async () => {
    const runId = "gate-client-gone";
    const leaving = new AbortController();
    const answer = fetch(`${stack.gatewayUrl}/chat/completions`, {
      method: "POST",
      signal: leaving.signal,
      headers: {
        authorization: `Bearer ${API_KEY}`,
        "content-type": "application/json",
        "x-holdfast-run": runId,
      },
      body: JSON.stringify({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "[[call:delete_repo]]" }],
        tools: [chatTool("delete_repo")],
      }),
    }).catch(() => undefined);
    await gated(runId);
    leaving.abort();
    await answer;
    const run = await waitFor(
      async () => {
        const view = await stack.run(runId);
        return view.gates[0]?.status === "abandoned" ? view : undefined;
      },
      { timeoutMs: 10_000, message: "the held answer was not recorded abandoned" },
    );
    expect(run.status).toBe("idle");
    expect(run.gates[0]?.decisionReason).toBe("client_gone");
    // Nothing is left to approve.
    expect((await decide("approve", runId)).status).toBe(409);
  });
});

describe("loop detection", () => {
  it("holds the answer the 3rd time in a row the model asks for the same call (key order ignored), and approval restarts the count", async () => {
    const runId = "gate-loop";
    const openai = client(runId);
    const ask = (args: string) =>
      openai.chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: `[[call:search ${args}]]` }],
        tools: [chatTool("search")],
      });
    await ask('{"q":"x","page":1}');
    await ask('{"page":1,"q":"x"}');
    const third = ask('{"q":"x","page":1}');
    const held = await gated(runId);
    expect(held).toMatchObject({ kind: "loop", tool: "search", rule: "max_repeated_tool_calls", step: 3 });
    expect(held.ruleText).toContain("3 times in a row");
    const run = await stack.run(runId);
    expect(run.status).toBe("held");
    expect(run.hold).toMatchObject({ kind: "loop" });
    await decide("approve", runId);
    expect((await third).choices[0]!.message.tool_calls?.[0]).toMatchObject({ function: { name: "search" } });
    // The count starts again after a decision: two more of the same pass.
    await ask('{"q":"x","page":1}');
    await ask('{"q":"x","page":1}');
    expect((await stack.settled(runId, 5)).gates).toHaveLength(1);
  });
});

describe("in ClickHouse", () => {
  it("lists a gated run as held and why while any answer is held, and every held answer with its decision in the tool_gate view", async () => {
    const runId = "gate-analytics";
    // The provider takes its time, so both calls are in flight before the first is held.
    const openai = client(runId, { defaultHeaders: { "X-Holdfast-Run": runId, "x-fake-latency-ms": "300" } });
    const ask = () =>
      openai.chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: '[[call:send_email {"to":"x@rival.io"}]]' }],
        tools: [chatTool("send_email")],
      });
    const first = rejecting(ask());
    const parallel = ask();
    await gated(runId, 2);
    const held = await waitFor(
      async () => {
        const [row] = await stack.sql<{ status: string; hold_reason: string }>(
          `SELECT status, hold_reason FROM runs WHERE run_id = '${runId}'`,
        );
        return row?.status === "held" ? row : undefined;
      },
      { timeoutMs: 15_000, message: "the projection never showed the run held" },
    );
    expect(held.hold_reason).toBe("gate tool_gate.deny[1]: send_email");
    // Deciding one of the two leaves the run held by the other, in the fold and in ClickHouse.
    const pending = (await stack.run(runId)).gates.filter((gate) => gate.status === "pending");
    await decide("approve", runId, { gate_id: pending[1]!.gateId, reason: "fine" });
    expect(await parallel.then((answer) => answer.choices[0]!.finish_reason)).toBe("tool_calls");
    expect((await stack.run(runId)).status).toBe("held");
    await sleep(1_000);
    const [still] = await stack.sql<{ status: string }>(`SELECT status FROM runs WHERE run_id = '${runId}'`);
    expect(still?.status).toBe("held");
    await decide("deny", runId, { reason: "no" });
    await first.catch(() => undefined);
    const rows = await waitFor(
      async () => {
        const found = await stack.sql<Record<string, unknown>>(
          `SELECT step, kind, tool, arguments, rule, action, decision, decided_by, reason, length(request_hash) AS hash_length
           FROM tool_gate WHERE run_id = '${runId}' ORDER BY decision DESC`,
        );
        return found.length === 2 && found.every((row) => row.decision !== "pending") ? found : undefined;
      },
      { timeoutMs: 15_000, message: "the tool_gate view never showed both decisions" },
    );
    expect(rows).toEqual([
      {
        step: pending[0]!.step,
        kind: "gate",
        tool: "send_email",
        arguments: '{"to":"x@rival.io"}',
        rule: "tool_gate.deny[1]",
        action: "hold",
        decision: "denied",
        decided_by: "control token",
        reason: "no",
        hash_length: 64,
      },
      expect.objectContaining({ step: pending[1]!.step, decision: "approved", reason: "fine" }),
    ]);
    await waitFor(
      async () => {
        const [row] = await stack.sql<{ status: string }>(
          `SELECT status FROM runs WHERE run_id = '${runId}'`,
        );
        return row?.status === "idle" ? true : undefined;
      },
      { timeoutMs: 15_000, message: "the projection never showed the run going on" },
    );
  });
});

describe("across gateways", () => {
  it("holds an answer on one gateway, parks the run's calls on another, and releases both on an approval made elsewhere", async () => {
    const runId = "gate-two-gateways";
    const other = await stack.extraGateway({});
    const onOther = other.client({ "X-Holdfast-Run": runId });
    const answer = onOther.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "[[call:delete_repo]]" }],
      tools: [chatTool("delete_repo")],
    });
    await gated(runId);
    // The same run's next call, on the first gateway, waits while the gate holds the run.
    const meanwhile = client(runId).chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "meanwhile" }],
    });
    await waitFor(async () => ((await stack.run(runId)).parked > 0 ? true : undefined), {
      timeoutMs: 10_000,
      message: "the run's call on the first gateway was not parked",
    });
    expect(await stillPending(answer, 500)).toBe(true);
    await decide("approve", runId);
    expect((await answer).choices[0]!.finish_reason).toBe("tool_calls");
    expect((await meanwhile).choices[0]!.message.content).toBe("Fake reply to: meanwhile");
  });
});
