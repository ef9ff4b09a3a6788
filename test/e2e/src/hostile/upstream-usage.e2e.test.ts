import type { StepView } from "@holdfast/events";
import { createPricer } from "@holdfast/providers";
import { waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "../stack.js";

// An upstream that reports usage no provider would: absurd, fractional, negative, overflowing,
// not a number at all (a buggy self-hosted server, or a tampered http:// upstream). Whatever
// it says, the call is answered, its step is recorded (never left in flight) and flagged,
// charged from Holdfast's own estimate, and the gateway goes on metering the calls after it.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ provider: { chunkDelayMs: 1 } });
});
afterAll(async () => {
  await stack?.close();
});

type Shape = "chat" | "responses" | "messages";
const MODELS: Record<Shape, string> = {
  chat: "gpt-4o",
  responses: "gpt-4o",
  messages: "claude-3-5-haiku-20241022",
};
// The counter each shape reports its output under.
const OUTPUT: Record<Shape, string> = {
  chat: "completion_tokens",
  responses: "output_tokens",
  messages: "output_tokens",
};

/**
 * One call in the shape, through the gateway with the official SDK, streamed or not; what the
 * agent read of the answer. `headers` steer the fake provider.
 */
async function ask(
  shape: Shape,
  stream: boolean,
  runId: string,
  content: string,
  headers: Record<string, string> = {},
): Promise<string> {
  const all = { "X-Holdfast-Run": runId, ...headers };
  const model = MODELS[shape];
  if (shape === "chat") {
    const client = stack.client({ headers: all });
    if (!stream) {
      const answer = await client.chat.completions.create({ model, messages: [{ role: "user", content }] });
      return answer.choices[0]?.message.content ?? "";
    }
    let text = "";
    const chunks = await client.chat.completions.create({
      model,
      stream: true,
      messages: [{ role: "user", content }],
    });
    for await (const chunk of chunks) text += chunk.choices[0]?.delta.content ?? "";
    return text;
  }
  if (shape === "responses") {
    const client = stack.client({ headers: all });
    if (!stream) return (await client.responses.create({ model, input: content })).output_text;
    let text = "";
    const events = await client.responses.create({ model, input: content, stream: true });
    for await (const event of events) if (event.type === "response.output_text.delta") text += event.delta;
    return text;
  }
  const client = stack.anthropic({ headers: all });
  if (!stream) {
    const answer = await client.messages.create({
      model,
      max_tokens: 256,
      messages: [{ role: "user", content }],
    });
    return answer.content.map((block) => (block.type === "text" ? block.text : "")).join("");
  }
  let text = "";
  const events = await client.messages.create({
    model,
    max_tokens: 256,
    stream: true,
    messages: [{ role: "user", content }],
  });
  for await (const event of events) {
    if (event.type === "content_block_delta" && event.delta.type === "text_delta") text += event.delta.text;
  }
  return text;
}

const pricer = createPricer();
/** What the bundled price list makes of a step's recorded usage. */
const priceOf = (step: StepView): number | null => {
  const price = pricer.price({
    model: step.model,
    usage: {
      reported: true,
      inputTokens: step.inputTokens,
      outputTokens: step.outputTokens,
      cachedInputTokens: step.cachedInputTokens,
      cacheWriteTokens: step.cacheWriteTokens,
      reasoningTokens: step.reasoningTokens,
    },
  });
  return price.known ? price.nanoUsd : null;
};

interface StepRow {
  step: number;
  estimated: boolean;
  usage_reported: boolean;
  usage_estimate: string;
  usage_problem: string;
  output_tokens: string;
  cost_usd: string | null;
}

/** The run's steps as the projection has them in ClickHouse, once all `steps` are there. */
function projected(runId: string, steps: number): Promise<StepRow[]> {
  return waitFor(
    async () => {
      const rows = await stack.sql<StepRow>(
        `SELECT step, estimated, usage_reported, usage_estimate, usage_problem, output_tokens, cost_usd FROM steps WHERE run_id = '${runId}' ORDER BY step`,
      );
      return rows.length === steps ? rows : undefined;
    },
    { timeoutMs: 15_000, message: `${steps} steps of ${runId} in ClickHouse` },
  );
}

const HOSTILE: readonly [label: string, json: string][] = [
  ["2^53", "9007199254740992"],
  ["2^64", "18446744073709551616"],
  ["10^15", "1000000000000000"],
  ["-5", "-5"],
  ['"12"', '"12"'],
  ["null", "null"],
];

describe.each(["chat", "responses", "messages"] as const)(
  "a %s upstream reporting impossible usage",
  (shape) => {
    describe.each([false, true])("stream: %s", (stream) => {
      it.each(HOSTILE)(
        "of %s output tokens: answered, recorded, flagged, charged from the estimate",
        async (label, value) => {
          const runId = `hostile-${shape}-${stream ? "stream" : "plain"}-${label.replace(/\W/g, "")}`;
          // A sound call first: the run's usual output is what an estimate charges.
          expect(await ask(shape, stream, runId, "first")).toBe("Fake reply to: first");
          const answered = await ask(shape, stream, runId, "second", {
            "x-fake-usage": `{"${OUTPUT[shape]}": ${value}}`,
          });
          expect(answered).toBe("Fake reply to: second");
          expect(await ask(shape, stream, runId, "third")).toBe("Fake reply to: third");

          const run = await stack.settled(runId, 3);
          expect(run.inFlight).toBe(0);
          const [first, hostile, third] = run.steps;
          expect(hostile).toMatchObject({
            status: "completed",
            estimated: true,
            usageReported: false,
            usageEstimate: "invalid",
            // The usual output of the run so far: the first call's.
            outputTokens: first?.outputTokens,
          });
          expect(hostile?.usageProblem).toContain(OUTPUT[shape]);
          expect(hostile?.inputTokens).toBeGreaterThan(0);
          expect(hostile?.costNanoUsd).toBe(priceOf(hostile!));
          expect(hostile?.costNanoUsd).toBeGreaterThan(0);
          // The call after it is metered and priced as any other.
          expect(third).toMatchObject({
            status: "completed",
            estimated: false,
            usageReported: true,
            usageProblem: "",
          });
          expect(third?.costNanoUsd).toBe(priceOf(third!));
          // Nor did prediction learn the figure: its estimate of the next call's output is the usual one.
          expect(third?.prediction?.estimatedOutputTokens).toBeGreaterThan(0);
          expect(third?.prediction?.estimatedOutputTokens).toBeLessThan(10_000);
          expect(run.totals.estimatedSteps).toBe(1);
          expect(run.totals.outputTokens).toBeLessThan(10_000);

          const rows = await projected(runId, 3);
          expect(
            rows.map((row) => [row.step, row.estimated, row.usage_reported, row.usage_estimate]),
          ).toEqual([
            [1, false, true, ""],
            [2, true, false, "invalid"],
            [3, false, true, ""],
          ]);
          expect(rows[1]?.usage_problem).toContain(OUTPUT[shape]);
          expect(Number(rows[2]?.cost_usd)).toBeCloseTo((third?.costNanoUsd ?? 0) / 1e9, 9);
        },
      );

      it("of 3.7 output tokens: rounded to 4, priced, and flagged as rounded", async () => {
        const runId = `hostile-${shape}-${stream ? "stream" : "plain"}-fraction`;
        expect(await ask(shape, stream, runId, "one", { "x-fake-usage": `{"${OUTPUT[shape]}": 3.7}` })).toBe(
          "Fake reply to: one",
        );
        const run = await stack.settled(runId, 1);
        expect(run.steps[0]).toMatchObject({
          status: "completed",
          outputTokens: 4,
          usageReported: true,
          estimated: false,
        });
        expect(run.steps[0]?.usageProblem).toContain("3.7");
        expect(run.steps[0]?.costNanoUsd).toBe(priceOf(run.steps[0]!));
      });
    });

    it("answering 200 with a body that is not JSON: recorded as failed, charged from the estimate", async () => {
      const runId = `hostile-${shape}-invalid-json`;
      expect(await ask(shape, false, runId, "first")).toBe("Fake reply to: first");
      const path =
        shape === "chat" ? "/chat/completions" : shape === "responses" ? "/responses" : "/messages";
      const body =
        shape === "chat"
          ? { model: MODELS[shape], messages: [{ role: "user", content: "second" }] }
          : shape === "responses"
            ? { model: MODELS[shape], input: "second" }
            : { model: MODELS[shape], max_tokens: 256, messages: [{ role: "user", content: "second" }] };
      const response = await fetch(`${stack.gatewayUrl}${path}`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${API_KEY}`,
          "anthropic-version": "2023-06-01",
          "X-Holdfast-Run": runId,
          "x-fake-fail": "invalid-json",
        },
        body: JSON.stringify(body),
      });
      // The agent gets what the provider sent: it is the provider's answer, however broken.
      expect(response.status).toBe(200);
      expect(() => JSON.parse(stack.provider.requests.at(-1)!.responseBody)).toThrow();
      expect(await response.text()).toBe(stack.provider.requests.at(-1)!.responseBody);

      const run = await stack.settled(runId, 2);
      expect(run.steps[1]).toMatchObject({
        status: "failed",
        upstreamStatus: 200,
        estimated: true,
        usageReported: false,
        usageEstimate: "missing",
        outputTokens: run.steps[0]?.outputTokens,
        failure: { reason: "upstream_invalid_answer" },
      });
      expect(run.steps[1]?.costNanoUsd).toBe(priceOf(run.steps[1]!));
      expect(run.steps[1]?.costNanoUsd).toBeGreaterThan(0);
    });

    it("cutting a stream mid-answer: the partial output is estimated from what was relayed and charged", async () => {
      const runId = `hostile-${shape}-cut`;
      await expect(
        ask(shape, true, runId, "a long answer, please", { "x-fake-fail": "reset-after:6" }),
      ).rejects.toThrow();
      const run = await stack.settled(runId, 1);
      expect(run.steps[0]).toMatchObject({
        status: "failed",
        estimated: true,
        usageEstimate: "partial",
        failure: { reason: "upstream_reset" },
      });
      expect(run.steps[0]?.inputTokens).toBeGreaterThan(0);
      expect(run.steps[0]?.outputTokens).toBeGreaterThan(0);
      expect(run.steps[0]?.outputTokens).toBeLessThanOrEqual(6);
      expect(run.steps[0]?.costNanoUsd).toBe(priceOf(run.steps[0]!));
      expect(run.steps[0]?.costNanoUsd).toBeGreaterThan(0);
    });
  },
);
