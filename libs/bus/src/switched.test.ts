import { describe, expect, it } from "vitest";
import { Switched } from "./switched.js";

function recorder() {
  const calls: string[] = [];
  let running = 0;
  let most = 0;
  const start = async () => {
    calls.push("start");
    running += 1;
    most = Math.max(most, running);
    await new Promise((resolve) => setTimeout(resolve, 5));
    return async () => {
      calls.push("stop");
      await new Promise((resolve) => setTimeout(resolve, 5));
      running -= 1;
    };
  };
  return { calls, start, running: () => running, most: () => most };
}

describe("Switched", () => {
  it("starts when wanted on and stops when wanted off", async () => {
    const r = recorder();
    const switched = new Switched(r.start, () => undefined);
    await switched.set(true);
    expect(switched.on).toBe(true);
    await switched.set(true);
    await switched.set(false);
    expect(switched.on).toBe(false);
    expect(r.calls).toEqual(["start", "stop"]);
  });

  it("never runs two at once, and the last wish wins however many come at once", async () => {
    const r = recorder();
    const switched = new Switched(r.start, () => undefined);
    const wishes = [true, false, true, false, true].map((on) => switched.set(on));
    await Promise.all(wishes);
    expect(switched.on).toBe(true);
    expect(r.running()).toBe(1);
    expect(r.most()).toBe(1);
    void switched.set(false);
    await switched.set(false);
    expect(r.running()).toBe(0);
  });

  it("tries a failed start again while it is still wanted, and not after", async () => {
    const errors: unknown[] = [];
    let attempts = 0;
    const switched = new Switched(
      async () => {
        attempts += 1;
        if (attempts < 3) throw new Error(`refused ${attempts}`);
        return () => undefined;
      },
      (error) => errors.push(error),
      10,
    );
    await switched.set(true);
    expect(switched.on).toBe(false);
    await expect.poll(() => switched.on, { timeout: 2_000 }).toBe(true);
    expect(attempts).toBe(3);
    expect(errors.map((e) => (e as Error).message)).toEqual(["refused 1", "refused 2"]);

    let later = 0;
    const off = new Switched(
      async () => {
        later += 1;
        throw new Error("refused");
      },
      () => undefined,
      10,
    );
    await off.set(true);
    await off.set(false);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(later).toBe(1);
  });

  it("stops for good on close and ignores later wishes", async () => {
    const r = recorder();
    const switched = new Switched(r.start, () => undefined);
    await switched.set(true);
    await switched.close();
    await switched.set(true);
    expect(switched.on).toBe(false);
    expect(r.calls).toEqual(["start", "stop"]);
  });

  it("stops a start that was in flight when it was closed, and reports a failing stop as a stop", async () => {
    const r = recorder();
    const switched = new Switched(r.start, () => undefined);
    const starting = switched.set(true);
    // The start is under way (it takes 5 ms) when the switch is closed.
    await new Promise((resolve) => setTimeout(resolve, 1));
    expect(r.calls).toEqual(["start"]);
    const closing = switched.close();
    await Promise.all([starting, closing]);
    expect(r.calls).toEqual(["start", "stop"]);
    expect(r.running()).toBe(0);

    const told: string[] = [];
    const failing = new Switched(
      async () => () => {
        throw new Error("stuck");
      },
      (error, during) => told.push(`${during}: ${(error as Error).message}`),
    );
    await failing.set(true);
    await failing.set(false);
    expect(failing.on).toBe(false);
    expect(told).toEqual(["stop: stuck"]);
  });

  it("keeps working when its error handler throws", async () => {
    let attempts = 0;
    const switched = new Switched(
      async () => {
        attempts += 1;
        if (attempts === 1) throw new Error("refused");
        return () => undefined;
      },
      () => {
        throw new Error("the handler broke");
      },
      10_000,
    );
    await switched.set(true);
    expect(switched.on).toBe(false);
    expect(switched.wanted).toBe(true);
    await switched.set(false);
    await switched.set(true);
    expect(switched.on).toBe(true);
  });
});
