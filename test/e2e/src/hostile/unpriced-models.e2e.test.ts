import Anthropic from "@anthropic-ai/sdk";
import { waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// A model with no known price used to pass every cost limit and budget, however much it
// spent: its cost was unknown, and unknown counted as nothing. Under a cost limit or a
// budget it is now charged at pricing.unknown_usd_per_mtok (or refused, with
// pricing.unknown: refuse); elsewhere its cost stays unknown, never zero.

const UNPRICED = "fake-unpriced-model";
// The default rate: USD 75 per million tokens, input and output alike, in nano-USD a token.
const UNKNOWN_NANO_PER_TOKEN = 75_000;

describe("an unpriced model, pricing.unknown: charge (the default)", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({
      config: {
        limits_by_tag: { capped: { max_cost_usd: 0.001 } },
        budgets: { budgeted: { daily_usd: 100 } },
        prices: { "fake-priced-here": { input_per_mtok: 1, output_per_mtok: 2 } },
        on_trip: "stop",
      },
    });
  });
  afterAll(async () => {
    await stack?.close();
  });

  const ask = (runId: string, tag: string | undefined, model: string, content = "Say hello") =>
    stack
      .client({
        headers: { "X-Holdfast-Run": runId, ...(tag === undefined ? {} : { "X-Holdfast-Tag": tag }) },
      })
      .chat.completions.create({ model, messages: [{ role: "user", content }] });

  it("is charged at the unknown rate under a cost limit, which then trips", async () => {
    await ask("unpriced-capped", "capped", UNPRICED);
    const first = await stack.settled("unpriced-capped", 1);
    const step = first.steps[0]!;
    expect(step).toMatchObject({
      status: "completed",
      usageReported: true,
      estimated: false,
      unknownPrice: true,
      usageEstimate: "",
    });
    expect(step.costNanoUsd).toBe((step.inputTokens + step.outputTokens) * UNKNOWN_NANO_PER_TOKEN);
    expect(first.totals).toMatchObject({ unpricedSteps: 0, estimatedSteps: 1 });
    expect(first.totals.costNanoUsd).toBeGreaterThan(1_000_000);

    // Past its $0.001: the next call trips the run (on_trip: stop answers 409).
    const refused = await ask("unpriced-capped", "capped", UNPRICED).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.ConflictError);
    const run = await stack.run("unpriced-capped");
    expect(run.hold?.trip).toMatchObject({ limit: "cost", limitValue: 1_000_000 });

    const rows = await waitFor(
      async () => {
        const found = await stack.sql<{
          unknown_price: boolean;
          estimated: boolean;
          cost_usd: string | null;
        }>("SELECT unknown_price, estimated, cost_usd FROM steps WHERE run_id = 'unpriced-capped'");
        return found.length === 1 ? found : undefined;
      },
      { timeoutMs: 15_000 },
    );
    expect(rows[0]).toMatchObject({ unknown_price: true, estimated: true });
    expect(Number(rows[0]?.cost_usd)).toBeCloseTo((step.costNanoUsd ?? 0) / 1e9, 9);
  });

  it("is charged at the unknown rate under a budget", async () => {
    await ask("unpriced-budgeted", "budgeted", UNPRICED);
    const run = await stack.settled("unpriced-budgeted", 1);
    const step = run.steps[0]!;
    expect(step.unknownPrice).toBe(true);
    expect(step.costNanoUsd).toBe((step.inputTokens + step.outputTokens) * UNKNOWN_NANO_PER_TOKEN);
  });

  it("stays unknown, never zero, for a run under no cost limit or budget", async () => {
    await ask("unpriced-free", undefined, UNPRICED);
    const run = await stack.settled("unpriced-free", 1);
    expect(run.steps[0]).toMatchObject({ costNanoUsd: null, unknownPrice: false, estimated: false });
    expect(run.totals).toMatchObject({ unpricedSteps: 1, estimatedSteps: 0 });
  });

  it("is priced as prices.<model> says when it has an entry there, limit or not", async () => {
    await ask("priced-here", "capped", "fake-priced-here");
    const run = await stack.settled("priced-here", 1);
    const step = run.steps[0]!;
    expect(step).toMatchObject({ unknownPrice: false, estimated: false });
    expect(step.costNanoUsd).toBe(step.inputTokens * 1_000 + step.outputTokens * 2_000);
  });
});

describe("an unpriced model, pricing.unknown: refuse", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({
      config: {
        pricing: { unknown: "refuse" },
        limits_by_tag: { capped: { max_cost_usd: 1 } },
        budgets: { budgeted: { daily_usd: 100 } },
      },
    });
  });
  afterAll(async () => {
    await stack?.close();
  });

  it.each(["capped", "budgeted"])(
    "is refused with a 400 in the call's shape, before anything is forwarded, for a run %s",
    async (tag) => {
      const before = stack.provider.requests.length;
      const openai = stack.client({ headers: { "X-Holdfast-Run": `refused-${tag}`, "X-Holdfast-Tag": tag } });
      const chat = await openai.chat.completions
        .create({ model: UNPRICED, messages: [{ role: "user", content: "Say hello" }] })
        .catch((error: unknown) => error);
      expect(chat).toBeInstanceOf(OpenAI.BadRequestError);
      expect(chat).toMatchObject({ status: 400, code: "model_unpriced", param: "model" });
      expect((chat as Error).message).toContain("pricing.unknown");

      const anthropic = stack.anthropic({
        headers: { "X-Holdfast-Run": `refused-${tag}`, "X-Holdfast-Tag": tag },
      });
      const messages = await anthropic.messages
        .create({ model: UNPRICED, max_tokens: 64, messages: [{ role: "user", content: "Say hello" }] })
        .catch((error: unknown) => error);
      expect(messages).toBeInstanceOf(Anthropic.BadRequestError);
      expect((messages as { error: { error: { type: string } } }).error.error.type).toBe(
        "invalid_request_error",
      );

      expect(stack.provider.requests.length).toBe(before);
      expect((await stack.run(`refused-${tag}`)).steps).toEqual([]);
    },
  );

  it("lets it through, its cost unknown, for a run under no cost limit or budget", async () => {
    const answer = await stack
      .client({ headers: { "X-Holdfast-Run": "refuse-free" } })
      .chat.completions.create({ model: UNPRICED, messages: [{ role: "user", content: "Say hello" }] });
    expect(answer.choices[0]?.message.content).toBe("Fake reply to: Say hello");
    const run = await stack.settled("refuse-free", 1);
    expect(run.steps[0]).toMatchObject({ costNanoUsd: null, unknownPrice: false });
  });

  it("lets a priced model through under a limit", async () => {
    await stack
      .client({ headers: { "X-Holdfast-Run": "refuse-priced", "X-Holdfast-Tag": "capped" } })
      .chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Say hello" }] });
    const run = await stack.settled("refuse-priced", 1);
    expect(run.steps[0]?.costNanoUsd).toBeGreaterThan(0);
  });
});
