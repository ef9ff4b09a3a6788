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

describe("one unnamed agent served by two gateways", () => {
  it("is split into the same generations whichever gateway a call reaches", async () => {
    const other = await stack.extraGateway({});
    const system = { role: "system" as const, content: "You are the shared fingerprint agent." };
    const first = { role: "user" as const, content: "Start." };
    const grown = [
      system,
      first,
      { role: "assistant" as const, content: "Ok." },
      { role: "user" as const, content: "More." },
    ];
    const send = (
      via: "here" | "there",
      messages: { role: "system" | "user" | "assistant"; content: string }[],
    ) =>
      (via === "here" ? stack.client() : other.client()).chat.completions
        .create({ model: "gpt-4o-mini", messages })
        .withResponse();
    const runs = async () => {
      const rows = await stack.bus.subjectCounts(`${stack.bus.subjects.prefix}.run.*.StepStarted`);
      return [...rows.keys()]
        .map((subject) => stack.bus.subjects.runIdOf(subject))
        .filter((id) => id.startsWith("fp-"));
    };
    const before = new Set(await runs());
    await send("here", [system, first]);
    await send("here", grown);
    // A shorter conversation on the other gateway: the agent started again, generation 2.
    await send("there", [system, first]);
    // The pointer moved in the shared bucket; this gateway's cached copy follows it.
    await new Promise((resolve) => setTimeout(resolve, 50));
    await send("here", grown);
    const fresh = (await runs()).filter((id) => !before.has(id)).sort();
    expect(fresh).toHaveLength(2);
    expect(fresh[0]).toMatch(/-1$/);
    expect(fresh[1]).toBe(fresh[0]!.replace(/-1$/, "-2"));
    const second = await stack.settled(fresh[1]!, 2);
    expect(second.steps.map((s) => s.messageCount)).toEqual([2, 4]);
  });
});
