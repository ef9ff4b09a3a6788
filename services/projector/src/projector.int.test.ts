import { runSql } from "@holdfast/analytics";
import { connectBus } from "@holdfast/bus";
import { ActorKind, LimitKind, RunAction } from "@holdfast/events";
import { natsUrl } from "@holdfast/test-harness";
import { describe, expect, it } from "vitest";
import {
  analytics,
  append,
  call,
  dieBetweenInsertAndAck,
  drained,
  LEASE_MS,
  log,
  prefix,
  totals,
  totalsOf,
  useProjectorFixture,
  waitFor,
} from "./projector.fixture.js";
import { Projector } from "./projector.js";

useProjectorFixture();

describe("projector", () => {
  it("projects every event once when it dies between the insert and the ack, and the next one resumes at the checkpoint", async () => {
    for (let i = 1; i <= 30; i++) await call(`run-${i % 3}`, i);

    // Projector A inserts its first batch, then freezes before acknowledging it, like a
    // process killed at exactly the wrong moment.
    await dieBetweenInsertAndAck({ ackWaitMs: 60_000 });
    // The batch is in ClickHouse but JetStream never heard it was done.
    expect(await totals()).toEqual(totalsOf(30));

    // Projector B takes over the same durable consumer once A's lease has gone unrenewed.
    // It starts delivery after the checkpoint, so it neither waits out the long ack_wait
    // nor counts the batch again.
    const busB = await connectBus({ servers: natsUrl(), prefix, name: "projector-b" });
    const b = new Projector({
      bus: busB,
      analytics,
      log,
      consumer: "proj",
      batchSize: 100,
      ackWaitMs: 60_000,
      leaseMs: LEASE_MS,
    });
    await b.start();
    for (let i = 31; i <= 40; i++) await call(`run-${i % 3}`, i);
    await waitFor(async () => (await totals()).steps === 40 && (await drained(busB, "proj")), {
      timeoutMs: 15_000,
      message: "new events not projected",
    });
    expect(b.status.eventsProjected).toBe(20);
    expect(await totals()).toEqual(totalsOf(40));
    await b.stop();
    await busB.close();
  });

  it("rebuilds run rows that agree with the events", async () => {
    const runs = await runSql(
      analytics,
      "SELECT run_id, steps, completed, input_tokens, status FROM runs ORDER BY run_id",
      {
        maxRows: 10,
      },
    );
    expect(runs.rows).toEqual([
      { run_id: "run-0", steps: 13, completed: 13, input_tokens: 130, status: "idle" },
      { run_id: "run-1", steps: 14, completed: 14, input_tokens: 140, status: "idle" },
      { run_id: "run-2", steps: 13, completed: 13, input_tokens: 130, status: "idle" },
    ]);
  });

  it("refuses to project a different stream into the same database", async () => {
    const other = await connectBus({ servers: natsUrl(), prefix: `${prefix}x`, name: "other" });
    await other.provision();
    const projector = new Projector({ bus: other, analytics, log, consumer: "proj", batchSize: 100 });
    await expect(projector.start()).rejects.toThrow(/projection of .*_EVENTS/);
    await other.close();
  });

  it("reads a rule's hold, a checkpoint's clearing and an answer refused on a stopped run as the fold does", async () => {
    await call("by-rule", 1);
    await append("by-rule", {
      $case: "runHeldByRule",
      value: { ruleId: "r-freeze", reason: "incident 42", selector: undefined },
    });
    await call("checkpointed", 1);
    await append("checkpointed", {
      $case: "runTripped",
      value: {
        trip: {
          limit: LimitKind.LIMIT_KIND_RATE_LIMIT,
          limitValue: 1_000,
          spentValue: 2_000,
          budgetKey: "",
          period: "",
          crossedByStepId: "",
          callModel: "gpt-4o-mini",
          prediction: undefined,
        },
        action: RunAction.RUN_ACTION_HOLD,
      },
    });
    await append("checkpointed", { $case: "checkpointCleared", value: { gateway: "gw#1", heldMs: 900 } });
    await call("stopped", 1);
    await append("stopped", {
      $case: "runStopped",
      value: {
        actor: { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "control token" },
        reason: "",
        selector: undefined,
      },
    });
    const toolCall = { id: "call_1", name: "send_email", arguments: "{}", argumentsTruncated: false };
    await append("stopped", {
      $case: "toolCallGated",
      value: {
        gateId: "g1",
        stepId: "stopped-1",
        step: 1,
        api: 1,
        model: "gpt-4o-mini",
        stream: false,
        toolCall,
        toolCalls: [toolCall],
        rule: "tool_gate.deny[0]",
        ruleText: "send_*",
        actor: { kind: ActorKind.ACTOR_KIND_GATE, name: "tool_gate.deny[0]" },
        action: RunAction.RUN_ACTION_HOLD,
        requestHash: "r",
        answerHash: "a",
        promptHash: "p",
        gateway: "gw#1",
        runStopped: true,
        toolCallsOmitted: 0,
      },
    });
    const bus = await connectBus({ servers: natsUrl(), prefix, name: "projector-c" });
    const projector = new Projector({
      bus,
      analytics,
      log,
      consumer: "proj",
      batchSize: 100,
      leaseMs: LEASE_MS,
    });
    await projector.start();
    const query = `SELECT run_id, status, hold_reason FROM runs WHERE run_id IN ('by-rule', 'checkpointed', 'stopped') ORDER BY run_id`;
    await waitFor(async () => (await runSql(analytics, query, { maxRows: 10 })).rows.length === 3, {
      timeoutMs: 15_000,
      message: "the runs were not projected",
    });
    expect((await runSql(analytics, query, { maxRows: 10 })).rows).toEqual([
      { run_id: "by-rule", status: "held", hold_reason: "rule r-freeze: incident 42" },
      { run_id: "checkpointed", status: "idle", hold_reason: "" },
      { run_id: "stopped", status: "stopped", hold_reason: "operator" },
    ]);
    const gate = await runSql(
      analytics,
      "SELECT gate_id, decision, reason FROM tool_gate WHERE run_id = 'stopped'",
      {
        maxRows: 10,
      },
    );
    expect(gate.rows).toEqual([{ gate_id: "g1", decision: "denied", reason: "the run is stopped" }]);
    await projector.stop();
    await bus.close();
  });
});
