import { describe, expect, it } from "vitest";
import { ParkingLot } from "./lot.js";

const MiB = 1024 * 1024;

describe("ParkingLot", () => {
  it("parks a run's calls up to its bound, then refuses and counts the rest", () => {
    const lot = new ParkingLot({ perRun: 2, perGateway: 10, bytes: 100 * MiB });
    expect([lot.take("a", 10), lot.take("a", 10), lot.take("a", 10)]).toEqual([
      undefined,
      undefined,
      "per_run",
    ]);
    expect(lot.take("b", 10)).toBeUndefined();
    expect(lot.parked).toBe(3);
    expect(lot.parkedBytes).toBe(30);
    expect(lot.refused).toEqual({ per_run: 1, per_gateway: 0, bytes: 0 });
  });

  it("parks no call past the gateway's bound, whatever its run", () => {
    const lot = new ParkingLot({ perRun: 5, perGateway: 2, bytes: 100 * MiB });
    expect([lot.take("a", 1), lot.take("b", 1), lot.take("c", 1)]).toEqual([
      undefined,
      undefined,
      "per_gateway",
    ]);
    expect(lot.refused).toEqual({ per_run: 0, per_gateway: 1, bytes: 0 });
  });

  it("parks no call whose body would take the bodies held past the bound of bytes", () => {
    const lot = new ParkingLot({ perRun: 100, perGateway: 100, bytes: 64 * MiB });
    expect([lot.take("a", 32 * MiB), lot.take("b", 32 * MiB), lot.take("c", 1)]).toEqual([
      undefined,
      undefined,
      "bytes",
    ]);
    expect(lot.limitOf("bytes")).toBe(64 * MiB);
    lot.leave("a", 32 * MiB);
    expect(lot.parkedBytes).toBe(32 * MiB);
    expect(lot.take("c", 1)).toBeUndefined();
    expect(lot.refused).toEqual({ per_run: 0, per_gateway: 0, bytes: 1 });
  });

  it("takes a call again once one left, and gives back no place it did not give", () => {
    const lot = new ParkingLot({ perRun: 1, perGateway: 1, bytes: MiB });
    expect(lot.take("a", 5)).toBeUndefined();
    expect(lot.take("a", 5)).toBe("per_gateway");
    lot.leave("a", 5);
    lot.leave("a", 5);
    lot.leave("never-parked", 5);
    expect(lot.parked).toBe(0);
    expect(lot.parkedBytes).toBe(0);
    expect(lot.take("a", 5)).toBeUndefined();
    expect(lot.parked).toBe(1);
  });

  it("lets calls released together go on a few per turn of the event loop, every one, in order", async () => {
    const lot = new ParkingLot({ perRun: 5, perGateway: 1_000, bytes: 100 * MiB });
    const gone: number[] = [];
    const all = Array.from({ length: 100 }, (_, i) => lot.turn().then(() => gone.push(i)));
    // The next turn of the loop (I/O, such as the rest of a fleet's resumes, between them).
    await new Promise((resolve) => setImmediate(resolve));
    expect(gone).toHaveLength(32);
    await Promise.all(all);
    expect(gone).toEqual(Array.from({ length: 100 }, (_, i) => i));
    // Alone, a released call goes on at the next turn.
    await lot.turn();
  });
});
