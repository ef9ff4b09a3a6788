import { ActorKind, createIdGenerator, makeEnvelope } from "@holdfast/events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "../stack.js";

// An attack run found that stopping a run stops only its calls on the three metered
// routes. Every other /v1/* path is passed through to the provider as it came, whatever
// the run it names: an agent whose run an operator stopped (or whose limit or budget
// stopped it) goes on generating, unmetered and unrecorded, through the provider's other
// generation endpoints (OpenAI's legacy /v1/completions, Anthropic's
// /v1/messages/batches, …); the provider is reached and bills the key.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
});

const post = (path: string, runId: string, body: unknown) =>
  fetch(`${new URL(stack.gatewayUrl).origin}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${API_KEY}`,
      "x-api-key": API_KEY,
      "anthropic-version": "2023-06-01",
      "x-holdfast-run": runId,
    },
    body: JSON.stringify(body),
  }).then(async (response) => {
    await response.arrayBuffer();
    return response.status;
  });

describe("a run an operator stopped", () => {
  it("reaches the provider by no route: its calls to other generation endpoints are refused, not forwarded", async () => {
    const runId = "stopped-agent";
    expect(
      await post("/v1/chat/completions", runId, {
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "hi" }],
      }),
    ).toBe(200);
    const before = await stack.settled(runId, 1);
    const control = await stack.connect("control");
    try {
      await control.append(
        makeEnvelope({
          id: createIdGenerator()(),
          runId,
          sequence: before.lastSequence + 1,
          timestampMs: Date.now(),
          tag: "",
          payload: {
            $case: "runStopped",
            value: {
              actor: { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "control token" },
              reason: "stop this agent",
              selector: undefined,
            },
          },
        }),
        (await control.readRun(runId)).lastStreamSequence,
      );
    } finally {
      await control.close();
    }
    expect(
      await post("/v1/chat/completions", runId, {
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "still there?" }],
      }),
    ).toBe(409);

    const forwardedBefore = stack.provider.requests.length;
    const legacy = await post("/v1/completions", runId, {
      model: "gpt-3.5-turbo-instruct",
      prompt: "after the stop",
    });
    const batch = await post("/v1/messages/batches", runId, {
      requests: [
        {
          custom_id: "after-the-stop",
          params: {
            model: "claude-3-5-haiku-20241022",
            max_tokens: 64,
            messages: [{ role: "user", content: "after the stop" }],
          },
        },
      ],
    });
    const paths = stack.provider.requests.slice(forwardedBefore).map((request) => request.path);
    expect(paths, `answered ${legacy} and ${batch}`).toEqual([]);
    expect([legacy, batch]).toEqual([409, 409]);
  });
});
