import { runSql } from "@holdfast/analytics";
import { describe, expect, it } from "vitest";
import {
  analytics,
  call,
  drained,
  type InsertArgs,
  interceptInserts,
  LEASE_MS,
  log,
  projectorBus,
  totals,
  totalsOf,
  useProjectorFixture,
  waitFor,
} from "./projector.fixture.js";
import { Projector, type ProjectorOptions } from "./projector.js";

useProjectorFixture();

function projector(options: Pick<ProjectorOptions, "bus"> & Partial<ProjectorOptions>): Projector {
  return new Projector({
    analytics,
    log,
    consumer: "proj",
    batchSize: 100,
    lingerMs: 100,
    leaseMs: LEASE_MS,
    ...options,
  });
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const forever = new Promise<never>(() => {});

// 2026-02-01T00:00:00Z: the first instant of February.
const FEBRUARY = Date.UTC(2026, 1, 1);

describe("projector, exactly once", () => {
  it("dies between the two tables' inserts: the next one replays the batch, and the first one's late insert adds nothing", async () => {
    for (let i = 1; i <= 30; i++) await call(`run-${i % 3}`, i);

    // A inserts the batch's events, then stops dead before its steps insert is sent.
    const busA = await projectorBus("projector-a");
    const stalled = deferred();
    const wakes = deferred();
    const lateInsert = deferred();
    const a = projector({
      bus: busA,
      analytics: interceptInserts(async (args, send) => {
        if (!args.table.startsWith("steps_")) return send(args);
        stalled.resolve();
        await wakes.promise;
        const sent = await send(args);
        lateInsert.resolve();
        return sent;
      }),
    });
    await a.start();
    await stalled.promise;
    expect(await totals()).toMatchObject({ events: 60, steps: 0 });
    await busA.abandon();

    // B stands by until A's lease runs out, then replays the batch from the checkpoint.
    const busB = await projectorBus("projector-b");
    const b = projector({ bus: busB });
    await b.start();
    try {
      await waitFor(async () => (await totals()).steps === 30 && (await drained(busB, "proj")), {
        timeoutMs: 15_000,
        message: "the batch A left half-inserted was not replayed",
      });
      expect(await totals()).toEqual(totalsOf(30));

      // A was only paused, past its lease check: it wakes and sends its steps insert late.
      wakes.resolve();
      await lateInsert.promise;
      expect(await totals()).toEqual(totalsOf(30));
      const stored = await runSql(
        analytics,
        "SELECT count() AS rows, uniqExact(event_id) AS events FROM steps",
        { maxRows: 1 },
      );
      expect(stored.rows[0]).toEqual({ rows: 30, events: 30 });
      expect(b.status.role).toBe("active");
    } finally {
      await b.stop();
      await busB.close();
    }
  });

  it("projects a batch that spans a month boundary once, though the crash left only one month's part", async () => {
    // Ten calls from 23:59:55 on January 31st to 00:00:04 on February 1st, one run across both.
    for (let i = 0; i < 10; i++) await call(`month-${i % 2}`, i + 1, FEBRUARY - 5_000 + i * 1_000);

    // A's insert of the batch becomes one part per month; only February's lands before it dies.
    const busA = await projectorBus("projector-a2");
    const died = deferred();
    const a = projector({
      bus: busA,
      analytics: interceptInserts(async (args, send) => {
        if (!args.table.startsWith("raw_events_")) return send(args);
        // Rows go as arrays under the insert's column list.
        const ts = args.columns!.indexOf("ts");
        const values = (args.values as unknown[][]).filter((row) => (row[ts] as number) >= FEBRUARY);
        await send({ ...args, values } as InsertArgs);
        died.resolve();
        return forever;
      }),
    });
    await a.start();
    await died.promise;
    await busA.abandon();
    expect(await totals()).toMatchObject({ events: 60 + 10, steps: 30 });

    const busB = await projectorBus("projector-b2");
    const b = projector({ bus: busB });
    await b.start();
    try {
      await waitFor(async () => (await totals()).steps === 40 && (await drained(busB, "proj")), {
        timeoutMs: 15_000,
        message: "the month-spanning batch was not replayed",
      });
      expect(await totals()).toEqual(totalsOf(40));
      const months = await runSql(
        analytics,
        `SELECT toYYYYMM(ts) AS month, count() AS events FROM events
       WHERE startsWith(run_id, 'month-') GROUP BY month ORDER BY month`,
        { maxRows: 10 },
      );
      expect(months.rows).toEqual([
        { month: 202601, events: 10 },
        { month: 202602, events: 10 },
      ]);
      const runs = await runSql(
        analytics,
        "SELECT run_id, steps, completed, input_tokens FROM runs WHERE startsWith(run_id, 'month-') ORDER BY run_id",
        { maxRows: 10 },
      );
      expect(runs.rows).toEqual([
        { run_id: "month-0", steps: 5, completed: 5, input_tokens: 50 },
        { run_id: "month-1", steps: 5, completed: 5, input_tokens: 50 },
      ]);
    } finally {
      await b.stop();
      await busB.close();
    }
  });

  it("keeps a second projector on the same consumer standing by while the first lives, and hands over when it dies", async () => {
    const busA = await projectorBus("projector-a3");
    const a = projector({ bus: busA });
    await a.start();
    const busB = await projectorBus("projector-b3");
    const b = projector({ bus: busB });
    await b.start();

    for (let i = 41; i <= 50; i++) await call(`run-${i % 3}`, i);
    await waitFor(async () => (await totals()).steps === 50 && (await drained(busA, "proj")), {
      timeoutMs: 15_000,
      message: "the active projector did not project",
    });
    // Several of B's looks at the lease have passed: it took nothing.
    await new Promise((resolve) => setTimeout(resolve, LEASE_MS));
    expect(a.status.eventsProjected).toBe(20);
    expect(b.status.eventsProjected).toBe(0);
    expect(a.status.role).toBe("active");
    expect(b.status).toMatchObject({ role: "standby", leaseHolder: a.status.leaseHolder });

    // A dies without letting go; B takes over once the lease has gone unrenewed.
    await busA.abandon();
    for (let i = 51; i <= 60; i++) await call(`run-${i % 3}`, i);
    await waitFor(async () => (await totals()).steps === 60 && (await drained(busB, "proj")), {
      timeoutMs: 15_000,
      message: "the standby did not take over",
    });
    expect(b.status).toMatchObject({ role: "active", eventsProjected: 20 });
    expect(await totals()).toEqual(totalsOf(60));

    // A projector that stops lets go, so the next one is active at once.
    await b.stop();
    await busB.close();
    const busC = await projectorBus("projector-c3");
    const c = projector({ bus: busC });
    await c.start();
    expect(c.status.role).toBe("active");
    await c.stop();
    await busC.close();
  });
});
