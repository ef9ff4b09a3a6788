import { type Bus, connectBus } from "@holdfast/bus";
import {
  ActorKind,
  Api,
  createIdGenerator,
  type GateAnswer,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import { start as startStep } from "@holdfast/events/fixtures";
import { createLogger } from "@holdfast/log";
import { natsUrl, uniqueNamespace } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runAggregate } from "./aggregates.js";
import { HeldRuns } from "./held.js";
import { Ledger } from "./ledger.js";

// The fleet-wide index of held runs, as a gateway that starts on an existing log builds it:
// from the latest hold, stop, resume and gate event of each run.
const log = createLogger({ name: "held-int-test", level: "silent" });
const labels = { tag: "", tenant: "" };
const operator = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "test" };
let bus: Bus;
let runs: Ledger<RunState, RunCommand>;

beforeAll(async () => {
  bus = await connectBus({ servers: natsUrl(), prefix: uniqueNamespace("held"), name: "held-int-test" });
  await bus.provision();
  runs = new Ledger({ aggregate: runAggregate, bus, log, clock: Date.now, newId: createIdGenerator() });
});
afterAll(async () => {
  await bus.close();
});

const start = (stepId: string) =>
  startStep(stepId, {
    model: "m",
    upstream: "http://x",
    gateway: "gw",
    estimatedInputTokens: 1,
    promptHash: "p",
  });

const call = { id: "c", name: "delete_repo", arguments: "{}", argumentsTruncated: false };
const gate = (gateId: string, stepId: string, action: "hold" | "stop" = "hold"): GateAnswer => ({
  type: "GateAnswer",
  gateId,
  stepId,
  step: 1,
  api: Api.API_OPENAI_CHAT_COMPLETIONS,
  model: "m",
  stream: false,
  toolCalls: [call],
  match: { kind: "gate", toolCall: call, rule: "tool_gate.deny[0]", ruleText: "delete_*" },
  action,
  requestHash: "",
  answerHash: "",
  promptHash: "",
  gateway: "gw",
});

/** Two calls of the run in flight, then their answers held by the gate. */
async function twoHeld(runId: string, action: "hold" | "stop" = "hold"): Promise<void> {
  await runs.execute(runId, labels, start(`${runId}-1`));
  await runs.execute(runId, labels, start(`${runId}-2`));
  await runs.execute(runId, labels, gate(`${runId}-g1`, `${runId}-1`, action));
  await runs.execute(runId, labels, gate(`${runId}-g2`, `${runId}-2`, action));
}

describe("the index of held runs, read at start", () => {
  it("holds a run while an answer is held, and stops it for a stop gate or a stop", async () => {
    await twoHeld("idx-held");
    await twoHeld("idx-stop", "stop");
    await twoHeld("idx-decided");
    await runs.execute("idx-decided", labels, { type: "ApproveAnswer", actor: operator, reason: "" });
    await runs.execute("idx-operator", labels, { type: "HoldRun", actor: operator, reason: "" });
    const index = new HeldRuns(bus);
    await index.load();
    expect(index.statusOf("idx-held")).toBe("held");
    expect(index.statusOf("idx-stop")).toBe("stopped");
    expect(index.statusOf("idx-decided")).toBeUndefined();
    expect(index.statusOf("idx-operator")).toBe("held");
    expect(index.uncertain("idx-held")).toBe(false);
  });

  it("says it cannot tell when the latest held answer is decided and an earlier one may still be held", async () => {
    await twoHeld("idx-partly");
    await runs.execute("idx-partly", labels, {
      type: "ApproveAnswer",
      actor: operator,
      reason: "",
      gateId: "idx-partly-g2",
    });
    expect((await runs.current("idx-partly")).status).toBe("held");
    const index = new HeldRuns(bus);
    await index.load();
    // Only the latest ToolCallGated was read: the run's own fold must decide.
    expect(index.statusOf("idx-partly")).toBeUndefined();
    expect(index.uncertain("idx-partly")).toBe(true);
    expect(index.uncertain("idx-decided")).toBe(true);
  });
});
