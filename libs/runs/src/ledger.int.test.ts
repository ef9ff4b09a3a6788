import { type Bus, connectBus } from "@holdfast/bus";
import {
  ActorKind,
  createIdGenerator,
  type Envelope,
  encodeEnvelope,
  makeEnvelope,
  RunStatus,
  RunStoppedError,
} from "@holdfast/events";
import { start as startStep } from "@holdfast/events/fixtures";
import { createLogger } from "@holdfast/log";
import { natsUrl, publishRaw, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runAggregate } from "./aggregates.js";
import { Ledger } from "./ledger.js";

const log = createLogger({ name: "ledger-int-test", level: "silent" });
const labels = { tag: "", tenant: "" };
const operator = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "test" };
let bus: Bus;

beforeAll(async () => {
  bus = await connectBus({ servers: natsUrl(), prefix: uniqueNamespace("runs"), name: "ledger-int-test" });
  await bus.provision();
});
afterAll(async () => {
  await bus.close();
});

function runLedger() {
  return new Ledger({ aggregate: runAggregate, bus, log, clock: Date.now, newId: createIdGenerator() });
}

describe("ledger", () => {
  it("after a conflict, reads the run from the last event it knew, not from the start", async () => {
    const reads: { runId: string; after: number | undefined }[] = [];
    const watched = new Proxy(bus, {
      get(target, key, receiver) {
        if (key === "readRun") {
          return (runId: string, after?: number) => {
            reads.push({ runId, after });
            return target.readRun(runId, after);
          };
        }
        const value = Reflect.get(target, key, receiver);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const here = new Ledger({
      aggregate: runAggregate,
      bus: watched,
      log,
      clock: Date.now,
      newId: createIdGenerator(),
    });
    const elsewhere = runLedger();
    for (let i = 0; i < 5; i++) {
      await elsewhere.execute("conflict-a", labels, { type: "HoldRun", actor: operator, reason: `${i}` });
      await elsewhere.execute("conflict-a", labels, {
        type: "ResumeRun",
        actor: operator,
        reason: `${i}`,
        onlyIfHeld: false,
      });
    }
    await here.execute("conflict-a", labels, { type: "HoldRun", actor: operator, reason: "here" });
    const known = (await bus.readRun("conflict-a")).lastStreamSequence;
    reads.length = 0;

    // Another process appends; this one, hearing nothing of it, decides on what it had
    // (held) and its append fails the log's sequence check.
    await elsewhere.execute("conflict-a", labels, {
      type: "ResumeRun",
      actor: operator,
      reason: "x",
      onlyIfHeld: false,
    });
    const { events } = await here.execute("conflict-a", labels, {
      type: "ResumeRun",
      actor: operator,
      reason: "again",
      onlyIfHeld: false,
    });
    expect(events.map((e) => e.type)).toEqual(["RunResumed"]);
    expect(reads).toEqual([{ runId: "conflict-a", after: known }]);
  });

  it("hears a run another process writes too as its events are stored, so taking turns on it meets no conflict", async () => {
    let reads = 0;
    const counted = new Proxy(bus, {
      get(target, key, receiver) {
        if (key === "readRun") {
          return (runId: string, after?: number) => {
            reads += 1;
            return target.readRun(runId, after);
          };
        }
        const value = Reflect.get(target, key, receiver);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const tailing = (ledgerBus: Bus) =>
      new Ledger({
        aggregate: runAggregate,
        bus: ledgerBus,
        log,
        clock: Date.now,
        newId: createIdGenerator(),
        tail: (id, handler) => bus.tail(id, handler),
      });
    const a = tailing(counted);
    const b = tailing(counted);
    // The first turns meet a conflict each: neither knows yet that the other writes the run.
    await a.execute("turns", labels, startStep("s-0"));
    await b.execute("turns", labels, startStep("s-1"));
    await a.execute("turns", labels, startStep("s-2"));
    // From then on, each has heard the other's last append before its own turn.
    await waitFor(() => a.cached("turns")?.lastSequence === 3 && b.cached("turns")?.lastSequence === 3, {
      timeoutMs: 5_000,
      message: "the run's events were not heard as they were stored",
    });
    const before = reads;
    for (let i = 3; i < 13; i++) {
      const ledger = i % 2 === 0 ? a : b;
      const other = i % 2 === 0 ? b : a;
      await ledger.execute("turns", labels, startStep(`s-${i}`));
      await waitFor(() => other.cached("turns")?.lastSequence === i + 1, {
        timeoutMs: 5_000,
        message: `step ${i} was not heard by the other writer`,
      });
    }
    expect(reads - before).toBe(0);
    expect((await bus.readRun("turns")).events).toHaveLength(13);
  });

  it("refuses a command only on the run as the log has it: a resume appended elsewhere, not heard yet, lets a stopped run's call start", async () => {
    const here = runLedger();
    const elsewhere = runLedger();
    await here.execute("refuse-a", labels, { type: "StopRun", actor: operator, reason: "stop" });
    await elsewhere.execute("refuse-a", labels, {
      type: "ResumeRun",
      actor: operator,
      reason: "go on",
      onlyIfHeld: false,
    });
    // This process has heard nothing of the resume (no watch feeds it): its cache says stopped.
    expect(here.cached("refuse-a")?.status).toBe(RunStatus.Stopped);
    const { events } = await here.execute("refuse-a", labels, startStep("s1"));
    expect(events.map((e) => e.type)).toEqual(["StepStarted"]);
    // Still stopped when the log says so: the refusal stands after the read.
    await elsewhere.execute("refuse-a", labels, { type: "StopRun", actor: operator, reason: "again" });
    await expect(here.execute("refuse-a", labels, startStep("s2"))).rejects.toBeInstanceOf(RunStoppedError);
  });

  it("reads every run it holds again once it is told it may have missed events (suspectAll)", async () => {
    const mine = runLedger();
    const other = runLedger();
    await mine.execute("suspect-1", labels, startStep("suspect-1-a"));
    // Another process appends; nothing brings it here.
    await other.execute("suspect-1", labels, startStep("suspect-1-b"));
    expect(mine.cached("suspect-1")?.lastSequence).toBe(1);
    expect((await mine.current("suspect-1")).lastSequence).toBe(1);
    mine.suspectAll();
    expect(mine.cached("suspect-1")).toBeUndefined();
    expect((await mine.current("suspect-1")).lastSequence).toBe(2);
    expect(mine.cached("suspect-1")?.lastSequence).toBe(2);
  });

  it("keeps at most maxCached runs in memory, never one somebody waits on", async () => {
    const here = new Ledger({
      aggregate: runAggregate,
      bus,
      log,
      clock: Date.now,
      newId: createIdGenerator(),
      maxCached: 3,
    });
    await here.execute("cache-0", labels, { type: "HoldRun", actor: operator, reason: "" });
    const unsubscribe = here.subscribe("cache-0", () => undefined);
    for (let i = 1; i < 8; i++) {
      await here.execute(`cache-${i}`, labels, { type: "HoldRun", actor: operator, reason: "" });
    }
    expect(here.cachedCount).toBe(3);
    expect(here.cached("cache-0")?.status).toBe(RunStatus.Held);
    expect(here.cached("cache-7")?.status).toBe(RunStatus.Held);
    expect(here.cached("cache-1")).toBeUndefined();
    unsubscribe();
  });

  it("foresees what a command would append on the state it follows, appending nothing", async () => {
    const ledger = runLedger();
    const lease = { type: "LeaseRun", worker: "w1", leaseMs: 30_000 } as const;
    // Nothing known of the run: no forecast.
    expect(ledger.foresee("foresee-1", lease)).toBeUndefined();
    await ledger.execute("foresee-1", labels, {
      type: "SubmitRun",
      agent: "research",
      version: "v1",
      inputJson: "{}",
      partitionKey: "",
      idempotencyKey: "",
      caps: { ceilingMs: 60_000, concurrencyPerKey: 0, startsPerMinute: 0 },
      actor: operator,
    });
    const foreseen = ledger.foresee("foresee-1", lease);
    expect(foreseen?.map((e) => e.$case)).toEqual(["runLeased"]);
    expect(foreseen?.[0]?.$case === "runLeased" && foreseen[0].value.lease).toBe(1);
    expect((await bus.readRun("foresee-1")).events.map((e) => e.envelope.type)).toEqual(["RunSubmitted"]);
    // While a command is in flight on the run, the state it follows is about to change.
    const leasing = ledger.execute("foresee-1", labels, lease);
    expect(ledger.foresee("foresee-1", lease)).toBeUndefined();
    await leasing;
    // The decider refuses a second lease of a running run: no forecast either.
    expect(ledger.foresee("foresee-1", lease)).toBeUndefined();
    expect((await bus.readRun("foresee-1")).events.map((e) => e.envelope.type)).toEqual([
      "RunSubmitted",
      "RunLeased",
    ]);
  });
});

describe("ledger adopting a history read in a batch", () => {
  it("appends after an adopted history without reading the run, and reads it when the log moved on meanwhile", async () => {
    const elsewhere = runLedger();
    await elsewhere.execute("adopt-a", labels, { type: "HoldRun", actor: operator, reason: "freeze" });
    await elsewhere.execute("adopt-a", labels, {
      type: "ResumeRun",
      actor: operator,
      reason: "",
      onlyIfHeld: true,
    });
    await elsewhere.execute("adopt-a", labels, { type: "HoldRun", actor: operator, reason: "freeze" });
    const history = await bus.readRun("adopt-a");
    const envelopes = history.events.map((e) => e.envelope);

    const here = runLedger();
    // Only a history from the first event without a gap is taken.
    expect(here.adopt("adopt-a", envelopes.slice(1), history.lastStreamSequence)).toBe(false);
    expect(here.adopt("adopt-a", [], history.lastStreamSequence)).toBe(false);
    expect(here.adopt("adopt-a", envelopes, history.lastStreamSequence)).toBe(true);
    expect(here.cached("adopt-a")?.status).toBe(RunStatus.Held);
    const resumed = await here.execute("adopt-a", labels, {
      type: "ResumeRun",
      actor: operator,
      reason: "thaw",
      onlyIfHeld: true,
    });
    expect(resumed.events.map((e) => e.type)).toEqual(["RunResumed"]);

    // Adopted, then the run moves on elsewhere (held again): the append conflicts, the run
    // is read, and the command is decided on what the log says.
    await elsewhere.execute("adopt-b", labels, { type: "HoldRun", actor: operator, reason: "freeze" });
    const before = await bus.readRun("adopt-b");
    const late = runLedger();
    expect(
      late.adopt(
        "adopt-b",
        before.events.map((e) => e.envelope),
        before.lastStreamSequence,
      ),
    ).toBe(true);
    await elsewhere.execute("adopt-b", labels, {
      type: "ResumeRun",
      actor: operator,
      reason: "x",
      onlyIfHeld: true,
    });
    await elsewhere.execute("adopt-b", labels, { type: "StopRun", actor: operator, reason: "y" });
    const after = await late.execute("adopt-b", labels, {
      type: "ResumeRun",
      actor: operator,
      reason: "thaw",
      onlyIfHeld: true,
    });
    expect(after.events.map((e) => e.type)).toEqual(["RunResumed"]);
    expect((await bus.readRun("adopt-b")).events.map((e) => e.envelope.type)).toEqual([
      "RunHeld",
      "RunResumed",
      "RunStopped",
      "RunResumed",
    ]);
  });
});

describe("ledger on a log holding what it cannot use", () => {
  const garbage = new Uint8Array([0xff, 0xff, 0xff, 0x00, 0x13]);

  it("goes on past an event it cannot decode: the run's next command appends after it", async () => {
    const here = runLedger();
    await here.execute("poison-bytes", labels, startStep("s1"));
    await publishRaw(natsUrl(), bus.subjects.runEvent("poison-bytes", "StepCompleted"), garbage);
    // The append meets the poison's place in the log, reads the run, and passes over it.
    const { events } = await here.execute("poison-bytes", labels, startStep("s2"));
    expect(events.map((e) => [e.type, e.sequence])).toEqual([["StepStarted", 2]]);
    expect((await here.current("poison-bytes")).started).toBe(2);
  });

  it("sets aside an event past the run's next sequence, and numbers the run's next event after its own last", async () => {
    const here = runLedger();
    await here.execute("poison-jump", labels, startStep("s1"));
    const forged = makeEnvelope({
      id: "forged",
      runId: "poison-jump",
      sequence: 1_000,
      timestampMs: Date.now(),
      tag: "",
      payload: { $case: "runStopped", value: { actor: operator, reason: "forged", selector: undefined } },
    });
    await publishRaw(natsUrl(), bus.subjects.runEvent("poison-jump", "RunStopped"), encodeEnvelope(forged));
    const { events, state } = await here.execute("poison-jump", labels, startStep("s2"));
    expect(events.map((e) => [e.type, e.sequence])).toEqual([["StepStarted", 2]]);
    expect(state).toMatchObject({ lastSequence: 2, status: RunStatus.Running });
    expect(bus.quarantineCounts.by_reason.out_of_sequence).toBe(1);
    // And again from the start: a reader of the whole run agrees, and the event, read twice
    // by this process, is counted once.
    expect(await runLedger().current("poison-jump")).toMatchObject({ lastSequence: 2, started: 2 });
    expect(bus.quarantineCounts.by_reason.out_of_sequence).toBe(1);
  });

  it("reads the run, setting nothing aside, when a feed brings only some of its events (a gap in the feed, not the log)", async () => {
    const here = runLedger();
    const other = runLedger();
    await here.execute("partial-feed", labels, startStep("s1"));
    await other.execute("partial-feed", labels, startStep("s2"));
    await other.execute("partial-feed", labels, startStep("s3"));
    const history = await bus.readRun("partial-feed");
    const last = history.events.at(-1)!;
    const before = bus.quarantineCounts.total;
    // Only the last event reaches this process (the urgent feed pushes only some types).
    here.heard({
      runId: "partial-feed",
      type: "StepStarted",
      streamSequence: last.streamSequence,
      subject: bus.subjects.runEvent("partial-feed", "StepStarted"),
      data: encodeEnvelope(last.envelope as Envelope),
    });
    expect(here.cached("partial-feed")).toBeUndefined();
    expect((await here.current("partial-feed")).lastSequence).toBe(3);
    expect(bus.quarantineCounts.total).toBe(before);
  });
});
