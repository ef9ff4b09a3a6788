import { createIdGenerator, type Envelope, StepCompleted } from "@holdfast/events";
import { waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// A later version of Holdfast adds event types (holds, approvals, …) and new versions of
// existing ones. Services still on this version meet them in the log before they are
// upgraded: they must keep working, skip what they cannot read, and never stall on it.
let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
});

const newId = createIdGenerator();

/** Appends, as a newer writer would, an event this version cannot read to the end of a run. */
async function appendFromTheFuture(
  runId: string,
  type: string,
  schemaVersion: number,
  payload?: Envelope["payload"],
): Promise<void> {
  const history = await stack.bus.readRun(runId);
  const last = history.events.at(-1)!;
  const envelope: Envelope = {
    id: newId(),
    type,
    schemaVersion,
    runId,
    sequence: last.envelope.sequence + 1,
    timestampMs: Date.now(),
    tag: "evolving",
    tenant: "",
    // A payload in a oneof case this version does not have decodes as none at all.
    payload,
  };
  await stack.bus.append(envelope, history.lastStreamSequence);
}

describe("events this version does not know", () => {
  it("are skipped and counted by the gateway and the projector, and the run goes on", async () => {
    const client = stack.client({ headers: { "X-Holdfast-Run": "evolving", "X-Holdfast-Tag": "evolving" } });
    const call = () =>
      client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
    await call();
    await stack.settled("evolving", 1);

    // A new type, and a new version of a type this version knows (StepCompleted v99).
    await appendFromTheFuture("evolving", "RunAnnotated", 1);
    await appendFromTheFuture("evolving", "StepCompleted", 99, {
      $case: "stepCompleted",
      value: StepCompleted.fromPartial({ finishReason: "a field v99 reads differently" }),
    });

    // The gateway that served the run heard both on its watch; a second gateway reads the
    // run from the log. Each appends after them, in order.
    await call();
    const other = await stack.extraGateway({});
    await other
      .client({ "X-Holdfast-Run": "evolving" })
      .chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
    const run = await stack.settled("evolving", 3);
    expect(run.unknownEvents).toBe(2);
    expect(run.steps.map((s) => [s.step, s.status])).toEqual([
      [1, "completed"],
      [2, "completed"],
      [3, "completed"],
    ]);
    const events = (await stack.bus.readRun("evolving")).events.map((e) => [
      e.envelope.sequence,
      e.envelope.type,
    ]);
    expect(events).toEqual([
      [1, "StepStarted"],
      [2, "StepCompleted"],
      [3, "RunAnnotated"],
      [4, "StepCompleted"],
      [5, "StepStarted"],
      [6, "StepCompleted"],
      [7, "StepStarted"],
      [8, "StepCompleted"],
    ]);

    // The projector kept its place in the log: every event is in `events` (the unknown
    // ones with an empty payload), the steps it can read are in `steps`, and it goes on.
    const rows = await waitFor(
      async () => {
        const found = await stack.sql<{ run_seq: number; type: string; payload: string }>(
          "SELECT run_seq, type, payload FROM events WHERE run_id = 'evolving' ORDER BY run_seq",
        );
        return found.length === 8 ? found : undefined;
      },
      { timeoutMs: 10_000, message: "the projector did not project past the unknown events" },
    );
    expect(rows.map((r) => [Number(r.run_seq), r.type])).toEqual(events);
    expect(rows[2]?.payload).toBe("{}");
    const steps = await stack.sql<{ n: string }>("SELECT count() AS n FROM steps WHERE run_id = 'evolving'");
    expect(Number(steps[0]?.n)).toBe(3);
    const health = (await (await fetch(`${stack.analyticsUrl}/health`)).json()) as {
      last_error: string | null;
    };
    expect(health.last_error).toBeNull();
  });
});
