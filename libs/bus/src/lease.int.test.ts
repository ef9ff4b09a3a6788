import { natsUrl, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Bus, connectBus } from "./bus.js";
import { Lease } from "./lease.js";

const prefix = uniqueNamespace("lease");
let bus: Bus;

beforeAll(async () => {
  bus = await connectBus({ servers: natsUrl(), prefix, name: "lease-int-test" });
});
afterAll(async () => {
  await bus.close();
});

/** A lease and what it has told its owner. */
async function contender(options: { key: string; holder: string; leaseMs: number; on?: Bus }) {
  const kv = await (options.on ?? bus).keyValue("LEASES");
  const lease = new Lease({ kv, key: options.key, holder: options.holder, leaseMs: options.leaseMs });
  const told: string[] = [];
  await lease.start({ acquired: () => told.push("acquired"), lost: () => told.push("lost") });
  return { lease, told };
}

describe("lease", () => {
  it("has one holder; another stands by, and holds it only once it has gone unrenewed", async () => {
    const elsewhere = await connectBus({ servers: natsUrl(), prefix, name: "lease-holder-a" });
    const a = await contender({ key: "dies", holder: "a", leaseMs: 600, on: elsewhere });
    const b = await contender({ key: "dies", holder: "b", leaseMs: 600 });
    expect(a.lease.held).toBe(true);
    expect(b.lease.held).toBe(false);
    expect(b.lease.holderSeen).toBe("a");

    // A's process goes away without letting go.
    await elsewhere.abandon();
    await waitFor(() => b.lease.held, { timeoutMs: 10_000, message: "the standby never took the lease" });
    expect(b.told).toEqual(["acquired"]);
    await waitFor(() => a.told.includes("lost"), { timeoutMs: 10_000, message: "A never knew it lost" });
    expect(a.lease.held).toBe(false);
    await b.lease.stop();
    await a.lease.stop();
  });

  it("is lost by a holder that finds someone else's revision when it renews", async () => {
    const a = await contender({ key: "taken", holder: "a", leaseMs: 600 });
    const kv = await bus.keyValue("LEASES");
    await kv.put("taken", JSON.stringify({ holder: "usurper", lease_ms: 600, renewed_at: "" }));
    await waitFor(() => a.told.includes("lost"), { timeoutMs: 10_000, message: "the holder did not notice" });
    expect(a.lease.held).toBe(false);
    expect(a.told).toEqual(["acquired", "lost"]);
    await a.lease.stop();
  });

  it("is free for the next one at once when its holder lets go", async () => {
    const a = await contender({ key: "released", holder: "a", leaseMs: 60_000 });
    expect(a.lease.held).toBe(true);
    await a.lease.stop();
    const b = await contender({ key: "released", holder: "b", leaseMs: 60_000 });
    expect(b.lease.held).toBe(true);
    // While B holds it, the next one stands by.
    const c = await contender({ key: "released", holder: "c", leaseMs: 60_000 });
    expect(c.lease.held).toBe(false);
    await c.lease.stop();
    await b.lease.stop();
  });
});
