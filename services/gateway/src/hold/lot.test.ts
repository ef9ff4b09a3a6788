import { describe, expect, it } from "vitest";
import { ParkingLot } from "./lot.js";

describe("ParkingLot", () => {
  it("parks a run's calls up to its bound, then refuses and counts the rest", () => {
    const lot = new ParkingLot({ perRun: 2, perGateway: 10 });
    expect([lot.take("a"), lot.take("a"), lot.take("a")]).toEqual([undefined, undefined, "per_run"]);
    expect(lot.take("b")).toBeUndefined();
    expect(lot.parked).toBe(3);
    expect(lot.refused).toEqual({ per_run: 1, per_gateway: 0 });
  });

  it("parks no call past the gateway's bound, whatever its run", () => {
    const lot = new ParkingLot({ perRun: 5, perGateway: 2 });
    expect([lot.take("a"), lot.take("b"), lot.take("c")]).toEqual([undefined, undefined, "per_gateway"]);
    expect(lot.refused).toEqual({ per_run: 0, per_gateway: 1 });
  });

  it("takes a call again once one left, and gives back no place it did not give", () => {
    const lot = new ParkingLot({ perRun: 1, perGateway: 1 });
    expect(lot.take("a")).toBeUndefined();
    expect(lot.take("a")).toBe("per_gateway");
    lot.leave("a");
    lot.leave("a");
    lot.leave("never-parked");
    expect(lot.parked).toBe(0);
    expect(lot.take("a")).toBeUndefined();
    expect(lot.parked).toBe(1);
  });
});
