import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// An attack run found that a provider decides how large a step's outcome event is: the
// answer's id, model, finish reason and every tool call's name go into the StepCompleted
// as they came, unbounded. An answer whose id is 2 MB (or one with 20,000 tool calls) makes
// an event over nats-server's max_payload (1 MB): the append is refused, the gateway
// retries it for ever (a warning a second in its log), the step stays in flight with
// nothing charged, and the run is wedged: its next call is never answered. (The gateway
// then does not close either: closing this stack waits out the hook's timeout.)

const answer = (id: string, toolCalls: number) =>
  JSON.stringify({
    id,
    object: "chat.completion",
    created: 1,
    model: "gpt-4o-mini",
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: "ok",
          ...(toolCalls === 0
            ? {}
            : {
                tool_calls: Array.from({ length: toolCalls }, (_, i) => ({
                  id: `call_${i}`,
                  type: "function",
                  function: { name: `tool_${"n".repeat(60)}_${i}`, arguments: "{}" },
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
  // The provider: by the model asked for, an answer with a 2 MB id, one with 20,000 tool
  // calls, or a plain one.
  upstream = createServer(async (request, response) => {
    let body = "";
    for await (const chunk of request) body += chunk;
    const { model } = JSON.parse(body) as { model: string };
    response.writeHead(200, { "content-type": "application/json" });
    if (model === "long-id") response.end(answer(`chatcmpl-${"x".repeat(2_000_000)}`, 0));
    else if (model === "many-tools") response.end(answer("chatcmpl-tools", 20_000));
    else response.end(answer("chatcmpl-plain", 0));
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const { port } = upstream.address() as AddressInfo;
  stack = await startStack({ config: { gateway: { upstream: `http://127.0.0.1:${port}/v1` } } });
});
afterAll(async () => {
  await stack?.close();
  await new Promise((resolve) => upstream?.close(resolve));
});

describe.each([
  { what: "a 2 MB answer id", model: "long-id" },
  { what: "20,000 tool calls", model: "many-tools" },
])("a provider whose answer has $what", ({ model }) => {
  it("leaves the step recorded, not in flight, and the run's next call answered", async () => {
    const runId = `oversized-${model}`;
    const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
    await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }] });
    const run = await stack.settled(runId, 1);
    expect(run.inFlight).toBe(0);
    const next = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "and then?" }],
    });
    expect(next.choices[0]?.message.content).toBe("ok");
    expect((await stack.settled(runId, 2)).completed + (await stack.run(runId)).failed).toBe(2);
  });
});
