import { runSql } from "@holdfast/analytics";
import { connectBus } from "@holdfast/bus";
import { natsUrl } from "@holdfast/test-harness";
import { describe, expect, it } from "vitest";
import {
  analytics,
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
});
