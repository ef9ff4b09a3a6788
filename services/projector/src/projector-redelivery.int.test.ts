import { connectBus } from "@holdfast/bus";
import { natsUrl } from "@holdfast/test-harness";
import { describe, expect, it } from "vitest";
import {
  analytics,
  call,
  dieBetweenInsertAndAck,
  drained,
  log,
  prefix,
  totals,
  useProjectorFixture,
  waitFor,
} from "./projector.fixture.js";
import { Projector } from "./projector.js";

useProjectorFixture();

describe("projector without consumer reset (nats-server before 2.14)", () => {
  it("skips a redelivered batch it already inserted, so totals stay exact", async () => {
    for (let i = 1; i <= 30; i++) await call(`run-${i % 3}`, i);

    await dieBetweenInsertAndAck({ ackWaitMs: 1_000, resetOnStart: false });
    expect(await totals()).toEqual({ events: 60, steps: 30, input: 300, cost: "0.00000021" });

    // The batch comes back after ack_wait, to a projector that must not count it again.
    const busB = await connectBus({ servers: natsUrl(), prefix, name: "projector-b" });
    const b = new Projector({
      bus: busB,
      analytics,
      log,
      consumer: "proj",
      batchSize: 100,
      ackWaitMs: 1_000,
      resetOnStart: false,
    });
    await b.start();
    await waitFor(() => drained(busB, "proj"), {
      timeoutMs: 15_000,
      message: "redelivered batch never acknowledged",
    });
    expect(b.status.eventsProjected).toBe(60);
    expect(await totals()).toEqual({ events: 60, steps: 30, input: 300, cost: "0.00000021" });
    await b.stop();
    await busB.close();
  });
});
