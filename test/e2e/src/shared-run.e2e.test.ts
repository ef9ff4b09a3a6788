import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// Any gateway serves any run. Two of them taking one run's calls at the same time must
// agree on its history: one step per call, numbered without gaps or repeats, every event
// in the run's order, nothing appended twice.
let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
});

describe("one run served by two gateways at once", () => {
  it("records every call once, in one gapless history", async () => {
    const other = await stack.extraGateway({});
    const clients = [
      stack.client({ headers: { "X-Holdfast-Run": "shared" } }),
      other.client({ "X-Holdfast-Run": "shared" }),
    ];
    const CALLS = 60;
    const answers = await Promise.all(
      Array.from({ length: CALLS }, (_, i) =>
        clients[i % 2]!.chat.completions.create({
          model: "gpt-4o-mini",
          stream: i % 3 === 0,
          messages: [{ role: "user", content: `call ${i}` }],
        }),
      ),
    );
    expect(answers).toHaveLength(CALLS);

    const run = await stack.settled("shared", CALLS);
    expect(run.steps.map((s) => s.step)).toEqual(Array.from({ length: CALLS }, (_, i) => i + 1));
    expect(run.steps.every((s) => s.status === "completed")).toBe(true);
    expect(new Set(run.steps.map((s) => s.gateway)).size).toBe(2);

    const events = (await stack.bus.readRun("shared")).events.map((e) => e.envelope);
    expect(events.map((e) => e.sequence)).toEqual(Array.from({ length: 2 * CALLS }, (_, i) => i + 1));
    expect(new Set(events.map((e) => e.id)).size).toBe(2 * CALLS);
    const outcomes = events.flatMap((e) => (e.payload?.$case === "stepCompleted" ? [e.payload.value] : []));
    expect(new Set(outcomes.map((o) => o.outcome?.stepId)).size).toBe(CALLS);
  });
});
