import { type Bus, connectBus } from "@holdfast/bus";
import { ActorKind, createIdGenerator, type RunCommand, type RunState } from "@holdfast/events";
import { start } from "@holdfast/events/fixtures";
import { createLogger } from "@holdfast/log";
import { KeyWindows } from "@holdfast/predict";
import type { SchedulerMessage } from "@holdfast/proto";
import { Ledger, runAggregate } from "@holdfast/runs";
import { natsUrl, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CapBook } from "./caps.js";
import { Scheduler, type WorkerLink } from "./scheduler.js";

// The scheduler against a real log: a run held back while its agent's key window cannot
// fit its next call, and what a worker is told when a lease handed over as it was being
// written does not land.

const log = createLogger({ name: "scheduler-int-test", level: "silent" });
const labels = { tag: "", tenant: "" };
const operator = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "test" };
let bus: Bus;

beforeAll(async () => {
  bus = await connectBus({
    servers: natsUrl(),
    prefix: uniqueNamespace("sched"),
    name: "scheduler-int-test",
  });
  await bus.provision();
});
afterAll(async () => {
  await bus.close();
});

const ledgerOf = () =>
  new Ledger<RunState, RunCommand>({
    aggregate: runAggregate,
    bus,
    log,
    clock: Date.now,
    newId: createIdGenerator(),
  });

function schedulerOn(ledger: Ledger<RunState, RunCommand>): Scheduler {
  return new Scheduler({
    ledger,
    readRun: async (runId) => (await bus.readRun(runId)).events.map((e) => e.envelope),
    caps: new CapBook(),
    windows: new KeyWindows(),
    clock: Date.now,
    log,
    leaseMs: 30_000,
    tail: () => () => undefined,
  });
}

function workerLink(
  name: string,
  session = 1,
  onTold: (message: SchedulerMessage["message"]) => void = () => undefined,
): WorkerLink & { told: SchedulerMessage["message"][] } {
  const told: SchedulerMessage["message"][] = [];
  return {
    id: `${name}#${session}`,
    name,
    serves: new Set(["research\u0000v1"]),
    slots: 1,
    send: (message) => {
      told.push(message.message);
      onTold(message.message);
    },
    told,
  };
}

const submit = (ledger: Ledger<RunState, RunCommand>, runId: string) =>
  ledger.execute(runId, labels, {
    type: "SubmitRun",
    agent: "research",
    version: "v1",
    inputJson: '{"q":"tides"}',
    partitionKey: "",
    idempotencyKey: "",
    caps: { ceilingMs: 60_000, concurrencyPerKey: 0, startsPerMinute: 0 },
    actor: operator,
  });

const typesOf = async (runId: string) => (await bus.readRun(runId)).events.map((e) => e.envelope.type);

const assignedRuns = (worker: { told: SchedulerMessage["message"][] }) =>
  worker.told.flatMap((m) => (m?.$case === "assigned" ? [m.value.runId] : []));

describe("scheduler", () => {
  it("holds a run back until its agent's key window fits its next call, a margin past the whole window cut to it", async () => {
    let nowMs = Date.now();
    const ledger = ledgerOf();
    const windows = new KeyWindows();
    const scheduler = new Scheduler({
      ledger,
      readRun: async (runId) => (await bus.readRun(runId)).events.map((e) => e.envelope),
      caps: new CapBook(),
      windows,
      clock: () => nowMs,
      log,
      leaseMs: 30_000,
      tail: () => () => undefined,
    });
    const worker = workerLink("w-window");
    try {
      scheduler.joined(worker, []);
      const first = await submit(ledger, "window-1");
      scheduler.enqueue("window-1", first.state);
      await waitFor(async () => ((await typesOf("window-1")).includes("RunLeased") ? true : undefined));
      // The agent's model call as the gateway starts it: an estimate of 600 tokens, and a
      // margin (3 σ) of 450 that takes it past its key's whole window of 1,000.
      const started = await ledger.execute(
        "window-1",
        labels,
        start("call-1", {
          prediction: {
            action: 1,
            keyId: "key-1",
            dimension: "tokens",
            limit: 1_000,
            remaining: 1_000,
            needed: 1_000,
            resetAtMs: 0,
            estimatedInputTokens: 550,
            estimatedOutputTokens: 50,
            estimatedTotalTokens: 600,
            sigma: 150,
            k: 3,
            waitedMs: 0,
            resumeAtMs: 0,
            exactInput: false,
          },
        }),
      );
      scheduler.heard("window-1", started.events[0]!);
      const done = await scheduler.done(worker.id, {
        requestId: 2,
        runId: "window-1",
        lease: 1,
        ok: true,
        outputJson: "1",
        degraded: "",
        error: "",
        label: "",
        ordinal: 0,
      });
      expect(done.ok).toBe(true);
      // The key as the gateway read it after the call: 400 of 1,000 left, whole again in 36 s.
      windows
        .of("key-1", "http://provider.test")
        .learn({ tokens: { limit: 1_000, remaining: 400, resetAtMs: nowMs + 36_000 } }, nowMs, nowMs);
      const second = await submit(ledger, "window-2");
      scheduler.enqueue("window-2", second.state);
      const turn = () => new Promise((resolve) => setImmediate(resolve));
      await turn();
      expect(assignedRuns(worker)).toEqual(["window-1"]);
      // 30 s on, 900 are back: not the whole window yet.
      nowMs += 30_000;
      scheduler.dispatch();
      await turn();
      expect(assignedRuns(worker)).toEqual(["window-1"]);
      // The whole window is back: the run is handed out.
      nowMs += 6_100;
      scheduler.dispatch();
      await waitFor(() => (assignedRuns(worker).length === 2 ? true : undefined), {
        message: "the run was not handed out once its window was whole",
      });
      expect(assignedRuns(worker)).toEqual(["window-1", "window-2"]);
    } finally {
      scheduler.close();
    }
  });

  it("hands a run over with its lease, and a step its worker records lands after the lease", async () => {
    const ledger = ledgerOf();
    const scheduler = schedulerOn(ledger);
    const worker = workerLink("w-fast");
    try {
      scheduler.joined(worker, []);
      const submitted = await submit(ledger, "handover-1");
      scheduler.enqueue("handover-1", submitted.state);
      // Sent before the lease's append has come back: the first message is the run.
      const assigned = await waitFor(() =>
        worker.told[0]?.$case === "assigned" ? worker.told[0].value : undefined,
      );
      expect(assigned).toMatchObject({
        runId: "handover-1",
        lease: 1,
        inputJson: '{"q":"tides"}',
        steps: [],
      });
      const recorded = await scheduler.step(worker.id, {
        requestId: 1,
        runId: "handover-1",
        lease: 1,
        label: "model",
        ordinal: 1,
        attempt: 1,
        ok: true,
        resultJson: '"ok"',
        error: "",
        final: true,
        durationMs: 1,
      });
      expect(recorded).toEqual({ ok: true, fenced: false, error: "" });
      expect(await typesOf("handover-1")).toEqual(["RunSubmitted", "RunLeased", "StepRecorded"]);
      expect(worker.told.map((m) => m?.$case)).toEqual(["assigned"]);
    } finally {
      scheduler.close();
    }
  });

  it("tells a worker handed a run early that its lease is over when the lease does not land, and hands the run out again once it may", async () => {
    const ledger = ledgerOf();
    const operators = ledgerOf();
    const scheduler = schedulerOn(ledger);
    const worker = workerLink("w-early");
    try {
      scheduler.joined(worker, []);
      const submitted = await submit(ledger, "handover-2");
      // Held by another process the scheduler has not heard yet: it foresees lease 1 and
      // hands the run over, but the log refuses the lease.
      await operators.execute("handover-2", labels, {
        type: "HoldRun",
        actor: operator,
        reason: "look first",
      });
      scheduler.enqueue("handover-2", submitted.state);
      await waitFor(() => (worker.told.length >= 2 ? true : undefined), {
        message: "the worker was never told",
      });
      expect(worker.told).toEqual([
        expect.objectContaining({
          $case: "assigned",
          value: expect.objectContaining({ runId: "handover-2", lease: 1 }),
        }),
        {
          $case: "revoked",
          value: { runId: "handover-2", lease: 1, reason: "its lease could not be recorded" },
        },
      ]);
      expect(await typesOf("handover-2")).toEqual(["RunSubmitted", "RunHeld"]);
      // A step the worker ran meanwhile is fenced: it was never the run's.
      const late = await scheduler.step(worker.id, {
        requestId: 1,
        runId: "handover-2",
        lease: 1,
        label: "model",
        ordinal: 1,
        attempt: 1,
        ok: true,
        resultJson: '"ran anyway"',
        error: "",
        final: true,
        durationMs: 1,
      });
      expect(late.fenced).toBe(true);
      expect(scheduler.counts()).toEqual({ queued: 1, running: 0, workers: 1 });
      // The worker lets go (its slot frees); the run is resumed and handed to it again.
      scheduler.letGoDone(worker.id, "handover-2", 1);
      await operators.execute("handover-2", labels, {
        type: "ResumeRun",
        actor: operator,
        reason: "go",
        onlyIfHeld: true,
      });
      await ledger.latest("handover-2");
      await scheduler.controlled("handover-2");
      await waitFor(() => (worker.told.length >= 3 ? true : undefined), {
        message: "never handed out again",
      });
      expect(worker.told[2]).toEqual(
        expect.objectContaining({ $case: "assigned", value: expect.objectContaining({ lease: 1 }) }),
      );
      await waitFor(async () => ((await typesOf("handover-2")).includes("RunLeased") ? true : undefined));
      expect(await typesOf("handover-2")).toEqual(["RunSubmitted", "RunHeld", "RunResumed", "RunLeased"]);
      expect(scheduler.counts()).toEqual({ queued: 0, running: 1, workers: 1 });
    } finally {
      scheduler.close();
    }
  });

  it("tells a worker reconnecting while its run's lease is still being written to let go, and the run goes on from the log", async () => {
    const ledger = ledgerOf();
    const scheduler = schedulerOn(ledger);
    const again = workerLink("w-flaky", 2);
    // The worker's next session says hello, claiming the run, the moment it is handed the
    // run: the lease's append has not come back yet.
    const first = workerLink("w-flaky", 1, (message) => {
      if (message?.$case === "assigned") scheduler.joined(again, [{ runId: message.value.runId, lease: 1 }]);
    });
    try {
      scheduler.joined(first, []);
      const submitted = await submit(ledger, "handover-3");
      scheduler.enqueue("handover-3", submitted.state);
      await waitFor(() => (again.told.length > 0 ? true : undefined), {
        message: "the new session was never told",
      });
      expect(again.told[0]).toEqual({
        $case: "revoked",
        value: { runId: "handover-3", lease: 1, reason: "lease_over" },
      });
      await waitFor(async () => ((await typesOf("handover-3")).includes("RunLeased") ? true : undefined));
      // The first session's close is noticed: its run is released and handed to the new one.
      await scheduler.left(first.id);
      const assigned = await waitFor(() => {
        const message = again.told.find((m) => m?.$case === "assigned");
        return message?.$case === "assigned" ? message.value : undefined;
      });
      expect(assigned).toMatchObject({ runId: "handover-3", lease: 2 });
      await waitFor(async () => ((await typesOf("handover-3")).length === 4 ? true : undefined));
      expect(await typesOf("handover-3")).toEqual(["RunSubmitted", "RunLeased", "RunReleased", "RunLeased"]);
      expect(scheduler.counts()).toEqual({ queued: 0, running: 1, workers: 1 });
    } finally {
      scheduler.close();
    }
  });
});
