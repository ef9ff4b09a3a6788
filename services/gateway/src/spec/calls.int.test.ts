import { Api, FailureReason } from "@holdfast/events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chat, messages, responses } from "./requests.js";
import {
  type AppendedEvent,
  answered,
  appended,
  forwarded,
  type GatewayWorld,
  gatewayWorld,
} from "./specification.js";

// A call through each API shape the gateway serves, as a user checks it: the agent gets the
// provider's answer, and the run records the step (started, then completed with the usage
// the provider reported and its cost), or its failure in the API's own error shape.

let world: GatewayWorld;
beforeAll(async () => {
  world = await gatewayWorld();
});
afterAll(async () => {
  await world?.close();
});

/** The usage a completed step recorded. */
function usageOf(event: AppendedEvent | undefined) {
  return (event?.outcome as { usage?: { inputTokens: number; outputTokens: number } } | undefined)?.usage;
}
function costOf(event: AppendedEvent | undefined) {
  return (event?.outcome as { cost?: { known: boolean; nanoUsd: number } } | undefined)?.cost;
}

describe("a call is forwarded, answered and recorded", () => {
  it("Chat Completions: the provider's answer, and its step started and completed with its usage and cost", async () => {
    const outcome = await world
      .specification()
      .given()
      .when(chat({ run: "chat-plain", content: "Tell me about lighthouses" }))
      .then(
        answered(200, {
          object: "chat.completion",
          choices: [{ message: { role: "assistant", content: "Fake reply to: Tell me about lighthouses" } }],
        }),
        appended("chat-plain", [
          {
            type: "StepStarted",
            step: 1,
            api: Api.API_OPENAI_CHAT_COMPLETIONS,
            model: "gpt-4o-mini",
            stream: false,
          },
          { type: "StepCompleted", outcome: { step: 1, upstreamStatus: 200, estimated: false } },
        ]),
        forwarded(1),
      );
    const completed = outcome.appended("chat-plain")[1];
    const body = outcome.body as { usage: { prompt_tokens: number; completion_tokens: number } };
    // What the run says the call used is what the provider said it used.
    expect(usageOf(completed)).toMatchObject({
      reported: true,
      inputTokens: body.usage.prompt_tokens,
      outputTokens: body.usage.completion_tokens,
    });
    expect(costOf(completed)?.known).toBe(true);
    expect(costOf(completed)?.nanoUsd).toBeGreaterThan(0);
  });

  it("Chat Completions, streamed: every event relayed, and the step completed with the stream's usage", async () => {
    const outcome = await world
      .specification()
      .given()
      .when(chat({ run: "chat-stream", content: "Stream me a story", stream: true }))
      .then(
        answered(200),
        appended("chat-stream", [
          { type: "StepStarted", step: 1, stream: true },
          { type: "StepCompleted", outcome: { step: 1, upstreamStatus: 200, stream: true } },
        ]),
      );
    expect(outcome.response.headers["content-type"]).toMatch(/^text\/event-stream/);
    expect(outcome.response.body).toContain("data: [DONE]");
    const chunks = outcome.response.body
      .split("\n")
      .filter((line) => line.startsWith("data: {"))
      .map(
        (line) =>
          JSON.parse(line.slice(6)) as {
            choices: { delta: { content?: string } }[];
            usage?: { prompt_tokens: number; completion_tokens: number } | null;
          },
      );
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? "").join("")).toBe(
      "Fake reply to: Stream me a story",
    );
    // The usage the stream's last chunk reported is the step's.
    const usage = chunks.findLast((chunk) => chunk.usage)?.usage;
    expect(usageOf(outcome.appended("chat-stream")[1])).toMatchObject({
      reported: true,
      inputTokens: usage?.prompt_tokens,
      outputTokens: usage?.completion_tokens,
    });
  });

  it("Responses: the provider's answer, and its step recorded with the Responses API's usage", async () => {
    const outcome = await world
      .specification()
      .given()
      .when(responses({ run: "responses-plain", content: "Name a colour" }))
      .then(
        answered(200, { object: "response", status: "completed" }),
        appended("responses-plain", [
          { type: "StepStarted", step: 1, api: Api.API_OPENAI_RESPONSES, model: "gpt-4o-mini" },
          { type: "StepCompleted", outcome: { step: 1, upstreamStatus: 200 } },
        ]),
      );
    const body = outcome.body as { id: string; usage: { input_tokens: number; output_tokens: number } };
    const completed = outcome.appended("responses-plain")[1];
    expect(usageOf(completed)).toMatchObject({
      inputTokens: body.usage.input_tokens,
      outputTokens: body.usage.output_tokens,
    });
    expect(completed?.outcome).toMatchObject({ responseId: body.id });
  });

  it("Anthropic Messages: the provider's answer, and its step recorded with Anthropic's usage", async () => {
    const outcome = await world
      .specification()
      .given()
      .when(messages({ run: "messages-plain", content: "Say hi" }))
      .then(
        answered(200, {
          type: "message",
          role: "assistant",
          content: [{ type: "text", text: "Fake reply to: Say hi" }],
        }),
        appended("messages-plain", [
          { type: "StepStarted", step: 1, api: Api.API_ANTHROPIC_MESSAGES },
          { type: "StepCompleted", outcome: { step: 1, upstreamStatus: 200 } },
        ]),
      );
    const body = outcome.body as { usage: { input_tokens: number; output_tokens: number } };
    expect(usageOf(outcome.appended("messages-plain")[1])).toMatchObject({
      inputTokens: body.usage.input_tokens,
      outputTokens: body.usage.output_tokens,
    });
  });

  it("Responses, streamed: the events relayed to response.completed, and the step completed with its usage", async () => {
    const outcome = await world
      .specification()
      .given()
      .when(responses({ run: "responses-stream", content: "Stream a colour", stream: true }))
      .then(
        answered(200),
        appended("responses-stream", [
          { type: "StepStarted", step: 1, api: Api.API_OPENAI_RESPONSES, stream: true },
          { type: "StepCompleted", outcome: { step: 1, upstreamStatus: 200, stream: true } },
        ]),
      );
    const completed = outcome.response.body
      .split("\n")
      .filter((line) => line.startsWith("data: {"))
      .map(
        (line) => JSON.parse(line.slice(6)) as { type: string; response?: { usage: Record<string, number> } },
      )
      .find((event) => event.type === "response.completed");
    expect(usageOf(outcome.appended("responses-stream")[1])).toMatchObject({
      reported: true,
      inputTokens: completed?.response?.usage.input_tokens,
      outputTokens: completed?.response?.usage.output_tokens,
    });
  });

  it("a run's second call is its step 2, after the steps the log already has", async () => {
    await world
      .specification()
      .given()
      .when(chat({ run: "two-calls", content: "first" }))
      .then(answered(200));
    await world
      .specification()
      .given()
      .when(chat({ run: "two-calls", content: "second" }))
      .then(
        answered(200),
        appended("two-calls", [
          { type: "StepStarted", step: 2 },
          { type: "StepCompleted", outcome: { step: 2 } },
        ]),
      );
  });
});

describe("a provider's error reaches the agent in its API's shape, and the step is recorded failed", () => {
  it("Chat Completions: a 400 is relayed and the step fails with the provider's status and error type", async () => {
    await world
      .specification()
      .given()
      .when(chat({ run: "chat-400", headers: { "x-fake-fail": "400" } }))
      .then(
        answered(400, { error: { type: "invalid_request_error" } }),
        appended("chat-400", [
          { type: "StepStarted", step: 1 },
          {
            type: "StepFailed",
            reason: FailureReason.FAILURE_REASON_UPSTREAM_STATUS,
            errorType: "invalid_request_error",
            outcome: { step: 1, upstreamStatus: 400 },
          },
        ]),
        forwarded(1),
      );
  });

  it("Anthropic Messages: an overloaded provider (529) is relayed as Anthropic's error", async () => {
    await world
      .specification()
      .given()
      .when(messages({ run: "messages-529", headers: { "x-fake-fail": "529" } }))
      .then(
        answered(529, { type: "error", error: { type: "overloaded_error" } }),
        appended("messages-529", [
          { type: "StepStarted", step: 1 },
          { type: "StepFailed", errorType: "overloaded_error", outcome: { step: 1, upstreamStatus: 529 } },
        ]),
      );
  });

  it("a provider that cannot be reached: 502 in the API's shape, and the step fails as unreachable", async () => {
    await world
      // Nothing listens there.
      .specification({ gateway: { upstream: "http://127.0.0.1:9/v1" } })
      .given()
      .when(chat({ run: "unreachable" }))
      .then(
        answered(502, { error: { code: "upstream_unreachable" } }),
        appended("unreachable", [
          { type: "StepStarted", step: 1 },
          {
            type: "StepFailed",
            reason: FailureReason.FAILURE_REASON_UPSTREAM_UNREACHABLE,
            outcome: { step: 1 },
          },
        ]),
        forwarded(0),
      );
  });
});
