import { type Bus, connectBus } from "@holdfast/bus";
import { natsUrl, uniqueNamespace } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Liveness } from "./liveness.js";

// Whether a gateway's calls in flight are orphans is judged from the gateways' bucket, which
// every gateway's credential may write: a beat it wrote for another is believed only as far
// as the server's own clock says it came.

let bus: Bus;
beforeAll(async () => {
  bus = await connectBus({
    servers: natsUrl(),
    prefix: uniqueNamespace("liveness"),
    name: "liveness-int-test",
  });
  await bus.provision();
  await bus.provisionBuckets();
});
afterAll(async () => {
  await bus.close();
});

const keyOf = (gatewayId: string) => Buffer.from(gatewayId, "utf8").toString("base64url");

describe("a gateway's liveness, as another judges it", () => {
  it("takes a value that is no beat for no sign of life, without failing the judging", async () => {
    const kv = await bus.keyValue("GATEWAYS");
    const judge = new Liveness(kv, "judge#1", 1_000, Date.now);
    await kv.put(keyOf("garbled#1"), "not json");
    await kv.put(keyOf("nonsense#1"), JSON.stringify({ beatMs: "soon", heartbeatMs: -1 }));
    expect(await judge.isAlive("garbled#1")).toBe(false);
    expect(await judge.isAlive("nonsense#1")).toBe(false);
    expect(await judge.isAlive("never-beat#1")).toBe(false);
  });

  it("times a beat by when it was stored: one dated a year ahead dies three beats after it came", async () => {
    const kv = await bus.keyValue("GATEWAYS");
    let now = Date.now();
    const judge = new Liveness(kv, "judge#2", 1_000, () => now);
    await kv.put(keyOf("future#1"), JSON.stringify({ beatMs: now + 365 * 86_400_000, heartbeatMs: 1_000 }));
    expect(await judge.isAlive("future#1")).toBe(true);
    now += 3_500;
    expect(await judge.isAlive("future#1")).toBe(false);
  });

  it("takes a beat dated at the epoch, stored now, for a live gateway", async () => {
    const kv = await bus.keyValue("GATEWAYS");
    const judge = new Liveness(kv, "judge#3", 1_000, Date.now);
    await kv.put(keyOf("epoch#1"), JSON.stringify({ beatMs: 0, heartbeatMs: 1_000 }));
    expect(await judge.isAlive("epoch#1")).toBe(true);
  });
});
