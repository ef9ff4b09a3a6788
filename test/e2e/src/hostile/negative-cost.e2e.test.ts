import { Api, createIdGenerator, makeEnvelope, StepCompleted, StepStarted } from "@holdfast/events";
import { waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// An attack run found that a step's cost, as the log holds it, is clamped at zero by every
// reader but the projector: the run fold and the budget service read a negative
// `cost.nano_usd` as 0, while the projection writes it to `steps.cost_usd` as it is. A
// stolen gateway credential (the one that writes steps) appends one StepCompleted of
// -$5,000,000 and every sum an operator takes with `holdfast query` (spend per run, per
// tag, in total) comes out millions of dollars short, while `holdfast show` says $0.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
});

describe("a step whose cost is negative, written with a stolen gateway credential", () => {
  it("counts as nothing in the projection, as it does in show and the budgets", async () => {
    await stack
      .client({ headers: { "X-Holdfast-Run": "honest" } })
      .chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
    await stack.settled("honest", 1);

    const newId = createIdGenerator();
    const runId = "refunded";
    const stepId = newId();
    const gateway = await stack.connect("gateway");
    try {
      const started = await gateway.append(
        makeEnvelope({
          id: newId(),
          runId,
          sequence: 1,
          timestampMs: Date.now(),
          tag: "",
          payload: {
            $case: "stepStarted",
            value: StepStarted.fromPartial({
              stepId,
              step: 1,
              api: Api.API_OPENAI_CHAT_COMPLETIONS,
              model: "gpt-4o-mini",
            }),
          },
        }),
        0,
      );
      await gateway.append(
        makeEnvelope({
          id: newId(),
          runId,
          sequence: 2,
          timestampMs: Date.now(),
          tag: "",
          payload: {
            $case: "stepCompleted",
            value: StepCompleted.fromPartial({
              outcome: {
                stepId,
                step: 1,
                upstreamStatus: 200,
                model: "gpt-4o-mini",
                usage: { reported: true, inputTokens: 5 },
                cost: { known: true, nanoUsd: -5_000_000 * 1e9 },
              },
            }),
          },
        }),
        started.streamSequence,
      );
    } finally {
      await gateway.close();
    }
    expect((await stack.run(runId)).window.costNanoUsd).toBe(0);

    const rows = await waitFor(
      async () => {
        const found = await stack.sql<{ cost: number; cost_problem: string }>(
          `SELECT toFloat64(ifNull(cost_usd, 0)) AS cost, cost_problem FROM steps WHERE run_id = '${runId}'`,
        );
        return found.length === 1 ? found : undefined;
      },
      { timeoutMs: 15_000, message: "the step was not projected" },
    );
    expect(rows[0]!.cost).toBeGreaterThanOrEqual(0);
    // An operator can see the figure the log held was not believed.
    expect(rows[0]!.cost_problem).toBe("cost -5000000 USD is negative; counted as 0");
    const [total] = await stack.sql<{ total: number }>("SELECT toFloat64(sum(cost_usd)) AS total FROM steps");
    expect(total!.total).toBeGreaterThanOrEqual(0);
  });
});
