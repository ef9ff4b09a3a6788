import Anthropic from "@anthropic-ai/sdk";
import { CONTINUE, GatewayError, type GatewayFeature } from "@holdfast/gateway";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// Limits, holds, the tool-call gate and prediction are features deciding at the
// pipeline's two hooks. This one refuses by run id, to show what each hook can do on
// every API shape: before forward, nothing is sent or charged; before deliver, the
// answer is metered and recorded, and the client gets the refusal instead of its end.
class Refused extends GatewayError {
  override readonly name = "Refused";
  readonly code = "refused_by_feature";
  readonly status = 403;
  readonly type = "permission_error";
  readonly retryable = false;
}

const refuseByRun: GatewayFeature = async (app) => {
  app.pipeline.beforeForward.push((call) =>
    call.run.runId.startsWith("stop-")
      ? { kind: "refuse", error: new Refused("A feature refused this call before it was sent.") }
      : CONTINUE,
  );
  app.pipeline.beforeDeliver.push((call, answer) =>
    call.run.runId.startsWith("withhold-") && answer.summary.usage.reported
      ? { kind: "refuse", error: new Refused("A feature withheld this answer.") }
      : CONTINUE,
  );
};

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ features: [refuseByRun] });
});
afterAll(async () => {
  await stack?.close();
});

type Caller = (runId: string, stream: boolean) => Promise<unknown>;
const SHAPES: [string, Caller][] = [
  [
    "chat completions",
    async (runId, stream) => {
      const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
      const messages = [{ role: "user" as const, content: "hello there" }];
      if (!stream) return client.chat.completions.create({ model: "gpt-4o-mini", messages });
      const events = await client.chat.completions.create({ model: "gpt-4o-mini", messages, stream: true });
      for await (const _ of events) {
        // drain
      }
    },
  ],
  [
    "responses",
    async (runId, stream) => {
      const client = stack.client({ headers: { "X-Holdfast-Run": runId } });
      if (!stream) return client.responses.create({ model: "gpt-4o-mini", input: "hello there" });
      return client.responses.stream({ model: "gpt-4o-mini", input: "hello there" }).finalResponse();
    },
  ],
  [
    "messages",
    async (runId, stream) => {
      const client = stack.anthropic({ headers: { "X-Holdfast-Run": runId } });
      const ask = {
        model: "claude-3-5-haiku-20241022",
        max_tokens: 64,
        messages: [{ role: "user" as const, content: "hello there" }],
      };
      if (!stream) return client.messages.create(ask);
      return client.messages.stream(ask).finalMessage();
    },
  ],
];

describe.each(SHAPES)("a feature at the pipeline's hooks, %s", (shape, call) => {
  it.each([false, true])(
    "refuses before forward (stream %s): nothing sent, nothing recorded",
    async (stream) => {
      const runId = `stop-${shape.replace(" ", "-")}-${stream}`;
      const before = stack.provider.requests.length;
      const error = await call(runId, stream).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(
        shape === "messages" ? Anthropic.PermissionDeniedError : OpenAI.PermissionDeniedError,
      );
      expect((error as Error).message).toContain("refused this call before it was sent");
      expect(stack.provider.requests.length).toBe(before);
      expect((await stack.bus.readRun(runId)).events).toHaveLength(0);
    },
  );

  it.each([false, true])(
    "withholds before deliver (stream %s): metered and recorded, the client gets the refusal",
    async (stream) => {
      const runId = `withhold-${shape.replace(" ", "-")}-${stream}`;
      const error = await call(runId, stream).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(shape === "messages" ? Anthropic.APIError : OpenAI.APIError);
      expect((error as Error).message).toContain("withheld this answer");
      const run = await stack.settled(runId, 1);
      expect(run.steps[0]).toMatchObject({ status: "completed", stream, usageReported: true });
      expect(run.steps[0]?.costNanoUsd).toBeGreaterThan(0);
    },
  );
});
