import { waitFor } from "@holdfast/test-harness";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// A call whose cost is beyond what an event can carry (int64 nano-USD, and what every
// reader decodes: 2^53 - 1) used to leave its outcome unwritten and every later call on
// the gateway answering 503. Its cost now saturates; the run, its limits and the budgets
// it spends from take the saturated figure and go on.

// One token of it costs USD 10^6: a few dozen tokens are past USD 9,007,199.254740991.
const DEAR = "fake-dear-model";
// USD 0.10 a token: a call's reservation fits a USD 100 budget, a call of 10^8 output tokens
// (the most one call may report) is past what an event can carry.
const STEEP = "fake-steep-model";
const MAX_NANO_USD = Number.MAX_SAFE_INTEGER;

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    config: {
      prices: {
        [DEAR]: { input_per_mtok: 1e12, output_per_mtok: 1e12 },
        [STEEP]: { input_per_mtok: 1e5, output_per_mtok: 1e5 },
      },
      limits_by_tag: { capped: { max_cost_usd: 1 } },
      budgets: { budgeted: { daily_usd: 100 } },
      on_trip: "stop",
    },
  });
});
afterAll(async () => {
  await stack?.close();
});

const ask = (runId: string, model: string, tag?: string, headers: Record<string, string> = {}) =>
  stack
    .client({
      headers: {
        "X-Holdfast-Run": runId,
        ...(tag === undefined ? {} : { "X-Holdfast-Tag": tag }),
        ...headers,
      },
    })
    .chat.completions.create({ model, messages: [{ role: "user", content: "Say hello" }] });

describe("a call that costs more than an event can carry", () => {
  it("is recorded at the saturated cost, twice over, and the gateway keeps metering", async () => {
    await ask("dear", DEAR);
    await ask("dear", DEAR);
    const run = await stack.settled("dear", 2);
    expect(run.steps.map((step) => step.costNanoUsd)).toEqual([MAX_NANO_USD, MAX_NANO_USD]);
    expect(run.totals.costNanoUsd).toBe(MAX_NANO_USD);
    expect(run.window.costNanoUsd).toBe(MAX_NANO_USD);

    // Another run on the same gateway is served and priced as ever.
    const answer = await ask("after-dear", "gpt-4o-mini");
    expect(answer.choices[0]?.message.content).toBe("Fake reply to: Say hello");
    const after = await stack.settled("after-dear", 1);
    expect(after.steps[0]?.costNanoUsd).toBeGreaterThan(0);
    expect(after.steps[0]?.costNanoUsd).toBeLessThan(1_000_000);

    const rows = await waitFor(
      async () => {
        const found = await stack.sql<{ cost: string }>(
          "SELECT toString(sum(cost_usd)) AS cost FROM steps WHERE run_id = 'dear'",
        );
        return found[0]?.cost === "18014398.509481982" ? found : undefined;
      },
      { timeoutMs: 15_000, message: "the saturated steps in ClickHouse" },
    );
    expect(rows).toHaveLength(1);
  });

  it("trips a cost limit, whose trip the log can carry", async () => {
    await ask("dear-capped", DEAR, "capped");
    const refused = await ask("dear-capped", DEAR, "capped").catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.ConflictError);
    const run = await stack.run("dear-capped");
    expect(run.hold?.trip).toMatchObject({ limit: "cost", limitValue: 1e9, spentValue: MAX_NANO_USD });
  });

  it("refuses a call whose reservation alone is more than a budget has: it trips the budget, never a 503", async () => {
    const refused = await ask("dear-budget-first", DEAR, "budgeted").catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.ConflictError);
    const run = await stack.run("dear-budget-first");
    expect(run.steps).toEqual([]);
    expect(run.hold?.trip).toMatchObject({ limit: "daily_budget", budgetKey: "budgeted" });
  });

  it("spends a budget, whose trip the log can carry", async () => {
    await ask("dear-budgeted", STEEP, "budgeted", { "x-fake-usage": '{"completion_tokens": 100000000}' });
    const first = await stack.settled("dear-budgeted", 1);
    expect(first.steps[0]).toMatchObject({ outputTokens: 100_000_000, costNanoUsd: MAX_NANO_USD });
    const refused = await waitFor(
      async () => {
        const outcome = await ask("dear-budgeted", "gpt-4o-mini", "budgeted").catch(
          (error: unknown) => error,
        );
        return outcome instanceof OpenAI.ConflictError ? outcome : undefined;
      },
      { timeoutMs: 15_000, message: "the spent budget to stop the run" },
    );
    expect(refused).toBeInstanceOf(OpenAI.ConflictError);
    const run = await stack.run("dear-budgeted");
    expect(run.hold?.trip).toMatchObject({ limit: "daily_budget", budgetKey: "budgeted", limitValue: 100e9 });
    expect(run.hold?.trip?.spentValue).toBeLessThanOrEqual(MAX_NANO_USD);
  });
});
