import { natsUrl, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Bus, connectBus } from "./bus.js";
import { KeyChangedError } from "./errors.js";
import type { KeyChange, KeyValue } from "./model.js";

// A bucket as the bus hands it out (Bus.keyValue): the pointers gateways, the budget
// service and the projector share. What each of them relies on, against a real server.

let bus: Bus;
let kv: KeyValue;

beforeAll(async () => {
  bus = await connectBus({ servers: natsUrl(), prefix: uniqueNamespace("kv"), name: "kv-int-test" });
  kv = await bus.keyValue("FINGERPRINTS");
});
afterAll(async () => {
  await bus.close();
});

describe("a bucket", () => {
  it("moves a key on by compare-and-set: a create of a key that has a value, or an update from a stale revision, is a KeyChangedError", async () => {
    const first = await kv.create("cas", "1");
    await expect(kv.create("cas", "other")).rejects.toBeInstanceOf(KeyChangedError);
    const second = await kv.update("cas", "2", first);
    expect(second).toBeGreaterThan(first);
    const stale = kv.update("cas", "3", first);
    await expect(stale).rejects.toBeInstanceOf(KeyChangedError);
    await expect(stale).rejects.toMatchObject({ code: "HOLDFAST_KEY_CHANGED", retryable: false });
    expect(await kv.get("cas")).toMatchObject({ key: "cas", value: "2", revision: second });
    await expect(kv.delete("cas", { revision: first })).rejects.toBeInstanceOf(KeyChangedError);
    expect((await kv.get("cas"))?.value).toBe("2");
  });

  it("reads a key never put, or deleted, as none, and lists only the keys that have a value; a deleted key can be created again", async () => {
    expect(await kv.get("never")).toBeUndefined();
    const before = Date.now();
    await kv.put("gone", "x");
    await kv.put("kept", "y");
    const kept = await kv.get("kept");
    expect(kept?.storedMs).toBeGreaterThanOrEqual(before - 1_000);
    await kv.delete("gone");
    expect(await kv.get("gone")).toBeUndefined();
    expect(await kv.keys()).toContain("kept");
    expect(await kv.keys()).not.toContain("gone");
    await kv.create("gone", "again");
    expect((await kv.get("gone"))?.value).toBe("again");
  });

  it("watches each key's last value, says with the last one that it has them all, then hears each put and delete", async () => {
    const other = await connectBus({ servers: natsUrl(), prefix: uniqueNamespace("kv"), name: "kv-watch" });
    try {
      const bucket = await other.keyValue("GATEWAYS");
      await bucket.put("a", "1");
      await bucket.put("b", "2");
      const heard: KeyChange[] = [];
      const watch = await bucket.watch();
      void (async () => {
        for await (const change of watch) heard.push(change);
      })();
      await waitFor(() => heard.length === 2);
      expect(heard.map((c) => [c.key, c.value, c.update, c.caughtUp])).toEqual([
        ["a", "1", false, false],
        ["b", "2", true, true],
      ]);
      await bucket.put("a", "3");
      await bucket.delete("b");
      await waitFor(() => heard.length === 4);
      expect(heard.slice(2).map((c) => [c.key, c.value, c.update, c.caughtUp])).toEqual([
        ["a", "3", true, true],
        ["b", undefined, true, true],
      ]);
      watch.stop();

      // Only what changes from now on.
      const updates: KeyChange[] = [];
      const later = await bucket.watch({ updatesOnly: true });
      void (async () => {
        for await (const change of later) updates.push(change);
      })();
      await bucket.put("c", "4");
      await waitFor(() => updates.length === 1);
      expect(updates[0]).toMatchObject({ key: "c", value: "4", update: true, caughtUp: true });
      later.stop();
    } finally {
      await other.close();
    }
  });
});

describe("the snapshot buckets' bound", () => {
  it("refuses new values at snapshots.max_storage_bytes, keeps what it holds, and is brought to a new bound", async () => {
    const other = await connectBus({ servers: natsUrl(), prefix: uniqueNamespace("kv"), name: "kv-bound" });
    try {
      await other.provisionBuckets({ snapshotMaxBytes: 64 * 1024 });
      const value = "x".repeat(4 * 1024);
      let stored = 0;
      let refused: unknown;
      for (let i = 0; i < 64 && refused === undefined; i++) {
        await other.putValue("SNAPSHOT_PARTS", `piece-${i}`, value).then(
          () => {
            stored += 1;
          },
          (error: unknown) => {
            refused = error;
          },
        );
      }
      expect(String(refused)).toMatch(/maximum bytes/i);
      expect(stored).toBeGreaterThan(8);
      // What it held is still there.
      const parts = await other.keyValue("SNAPSHOT_PARTS");
      expect((await parts.get("piece-0"))?.value).toBe(value);
      expect((await other.bucketSize("SNAPSHOT_PARTS")).bytes).toBeLessThanOrEqual(64 * 1024);
      // Other buckets have no such bound.
      await other.putValue("GATEWAYS", "big", "y".repeat(128 * 1024));
      // A larger bound, provisioned again, lets it take more.
      await other.provisionBuckets({ snapshotMaxBytes: 1024 * 1024 });
      await other.putValue("SNAPSHOT_PARTS", "after", value);
      expect((await parts.get("after"))?.value).toBe(value);
    } finally {
      await other.close();
    }
  });
});
