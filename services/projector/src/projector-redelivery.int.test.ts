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

describe("projector without consumer reset (nats-server before 2.14)", () => {
  it("skips a redelivered batch it already inserted, so totals stay exact", async () => {
    for (let i = 1; i <= 30; i++) await call(`run-${i % 3}`, i);

    await dieBetweenInsertAndAck({ ackWaitMs: 1_000, resetOnStart: false });
    expect(await totals()).toEqual(totalsOf(30));

    // The batch comes back after ack_wait, to a projector that must not count it again.
    const busB = await connectBus({ servers: natsUrl(), prefix, name: "projector-b" });
    const b = new Projector({
      bus: busB,
      analytics,
      log,
      consumer: "proj",
      batchSize: 100,
      ackWaitMs: 1_000,
      // Well inside ack_wait, as the config requires.
      lingerMs: 100,
      resetOnStart: false,
      leaseMs: LEASE_MS,
    });
    await b.start();
    await waitFor(() => drained(busB, "proj"), {
      timeoutMs: 15_000,
      message: "redelivered batch never acknowledged",
    });
    expect(b.status.eventsProjected).toBe(60);
    expect(await totals()).toEqual(totalsOf(30));
    await b.stop();
    await busB.close();
  });

  it("reads events acknowledged but never projected straight from the stream, so the checkpoint passes none", async () => {
    // A former holder's pull took these and they were acknowledged, but they never reached
    // ClickHouse (as when the consumer ran ahead of a database that was lost or rebuilt).
    for (let i = 31; i <= 40; i++) await call(`run-${i % 3}`, i);
    const busX = await connectBus({ servers: natsUrl(), prefix, name: "former-holder" });
    // What the consumer has now (up to 20), acknowledged through the last.
    const puller = busX.puller("proj");
    const taken = await puller.pull(20);
    await puller.ackThrough(taken.at(-1)!);
    puller.close();
    await busX.close();
    for (let i = 41; i <= 45; i++) await call(`run-${i % 3}`, i);

    const busB = await connectBus({ servers: natsUrl(), prefix, name: "projector-c" });
    const c = new Projector({
      bus: busB,
      analytics,
      log,
      consumer: "proj",
      // Smaller than the hole, which is then read a batch at a time.
      batchSize: 4,
      ackWaitMs: 1_000,
      // Well inside ack_wait, as the config requires.
      lingerMs: 100,
      resetOnStart: false,
      leaseMs: LEASE_MS,
    });
    await c.start();
    await waitFor(async () => (await totals()).steps === 45 && (await drained(busB, "proj")), {
      timeoutMs: 15_000,
      message: "events after the hole were not projected",
    });
    expect(await totals()).toEqual(totalsOf(45));
    await c.stop();
    await busB.close();
  });
});
