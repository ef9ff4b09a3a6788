import { type Bus, connectBus, type WatchedEvent } from "@holdfast/bus";
import { ActorKind, createIdGenerator, type RunCommand, type RunState } from "@holdfast/events";
import { start as startStep } from "@holdfast/events/fixtures";
import { createLogger } from "@holdfast/log";
import { natsUrl, uniqueNamespace } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runAggregate } from "./aggregates.js";
import { LogFollower } from "./follower.js";
import { Ledger } from "./ledger.js";

// What a process following the log hears: the events it must act on at once, always; the
// rest (other processes' calls) only while it follows everything.
const log = createLogger({ name: "follower-int-test", level: "silent" });
const labels = { tag: "", tenant: "" };
let bus: Bus;
let writer: Ledger<RunState, RunCommand>;

beforeAll(async () => {
  // A short linger, so that an event the watch would bring is brought well within the waits below.
  bus = await connectBus({
    servers: natsUrl(),
    prefix: uniqueNamespace("follower"),
    name: "follower-int-test",
    watchLingerMs: 20,
  });
  await bus.provision();
  writer = new Ledger({ aggregate: runAggregate, bus, log, clock: Date.now, newId: createIdGenerator() });
});
afterAll(async () => {
  await bus.close();
});

const hold: RunCommand = {
  type: "HoldRun",
  actor: { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "test" },
  reason: "",
};
const settle = () => new Promise((resolve) => setTimeout(resolve, 300));

describe("a process following the log", () => {
  it("hears urgent events always, and every event only while it follows everything", async () => {
    const heard: WatchedEvent[] = [];
    const follower = new LogFollower(bus, [{ heard: (event) => heard.push(event) }]);
    await follower.start();
    const of = (runId: string) => heard.filter((e) => e.runId === runId).map((e) => e.type);
    try {
      expect(follower.followingEverything).toBe(false);
      await writer.execute("f-1", labels, startStep("f-1-a"));
      await writer.execute("f-1", labels, hold);
      await expect.poll(() => of("f-1")).toEqual(["RunHeld"]);
      await settle();
      expect(of("f-1")).toEqual(["RunHeld"]);

      await follower.followEverything(true);
      expect(follower.followingEverything).toBe(true);
      await writer.execute("f-2", labels, startStep("f-2-a"));
      await expect.poll(() => of("f-2")).toEqual(["StepStarted"]);

      await follower.followEverything(false);
      expect(follower.followingEverything).toBe(false);
      await writer.execute("f-3", labels, startStep("f-3-a"));
      await writer.execute("f-3", labels, hold);
      await expect.poll(() => of("f-3")).toEqual(["RunHeld"]);
      await settle();
      expect(of("f-3")).toEqual(["RunHeld"]);
    } finally {
      await follower.stop();
    }
  });
});
