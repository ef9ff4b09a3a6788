import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// An outcome the log refuses for good (here, larger than a nats-server configured with a
// small max_payload takes, though within every bound Holdfast holds an event to) is not
// retried for ever, nor dropped: it is recorded again abridged, without the provider's
// texts, its usage and cost standing, so the step is never left in flight uncharged.

const MAX_PAYLOAD = 16 * 1024;
const TOOL_CALLS = 128;

const answer = (toolCalls: number) =>
  JSON.stringify({
    id: "chatcmpl-refused",
    object: "chat.completion",
    created: 1,
    model: "gpt-4o-mini",
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: toolCalls === 0 ? "ok" : null,
          ...(toolCalls === 0
            ? {}
            : {
                tool_calls: Array.from({ length: toolCalls }, (_, i) => ({
                  id: `call_${i}`,
                  type: "function",
                  function: { name: `tool_${"n".repeat(190)}_${i}`, arguments: "{}" },
                })),
              }),
        },
        finish_reason: toolCalls === 0 ? "stop" : "tool_calls",
      },
    ],
    usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
  });

let upstream: Server;
let stack: Stack;
beforeAll(async () => {
  upstream = createServer(async (request, response) => {
    let body = "";
    for await (const piece of request) body += piece;
    const { model } = JSON.parse(body) as { model: string };
    response.writeHead(200, { "content-type": "application/json" });
    response.end(answer(model === "many-long-tools" ? TOOL_CALLS : 0));
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const { port } = upstream.address() as AddressInfo;
  stack = await startStack({
    natsMaxPayload: MAX_PAYLOAD,
    config: { gateway: { upstream: `http://127.0.0.1:${port}/v1` } },
  });
});
afterAll(async () => {
  await stack?.close();
  await new Promise((resolve) => upstream?.close(resolve));
});

describe("an outcome the log refuses for its size", () => {
  it("is recorded abridged, usage and cost standing, and the run's next call is answered", async () => {
    const runId = "refused-outcome";
    const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
    const first = await client.chat.completions.create({
      model: "many-long-tools",
      messages: [{ role: "user", content: "hi" }],
    });
    // The agent has the whole answer: only the record of it is abridged.
    expect(first.choices[0]?.message.tool_calls).toHaveLength(TOOL_CALLS);
    const [step] = (await stack.settled(runId, 1)).steps;
    expect(step).toMatchObject({
      status: "completed",
      abridged: true,
      toolCalls: [],
      toolCallsOmitted: TOOL_CALLS,
      finishReason: "",
      inputTokens: 5,
      outputTokens: 1,
      usageReported: true,
      // The model it was charged for stands.
      model: "gpt-4o-mini",
    });
    expect(step?.costNanoUsd).not.toBeNull();
    expect(stack.logs()).toMatch(/max_payload/);
    const next = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "and then?" }],
    });
    expect(next.choices[0]?.message.content).toBe("ok");
    const [, second] = (await stack.settled(runId, 2)).steps;
    expect(second).toMatchObject({ status: "completed", abridged: false, finishReason: "stop" });
  });
});
