import { runSql } from "@holdfast/analytics";
import { connectBus } from "@holdfast/bus";
import { Api, encodeEnvelope, makeEnvelope, StepCompleted, StepStarted } from "@holdfast/events";
import { natsUrl, publishRaw } from "@holdfast/test-harness";
import { describe, expect, it } from "vitest";
import {
  analytics,
  append,
  call,
  drained,
  interceptInserts,
  LEASE_MS,
  log,
  prefix,
  totals,
  totalsOf,
  useProjectorFixture,
  waitFor,
} from "./projector.fixture.js";
import { Projector } from "./projector.js";

useProjectorFixture();

// The log is append-only: an event the projector cannot use stays in it for ever. Retried,
// it stopped the projection for good (steps, runs, ls and selector holds stood still); the
// projector sets it aside in quarantined_events and goes on.

const subject = (runId: string, type: string) => `${prefix}.run.${runId}.${type}`;
const started = makeEnvelope({
  id: "e-start",
  runId: "poisoned",
  sequence: 3,
  timestampMs: Date.now(),
  tag: "t",
  payload: { $case: "stepStarted", value: StepStarted.fromPartial({ stepId: "x", step: 2 }) },
});
const garbage = new Uint8Array([0xff, 0xff, 0xff, 0x00, 0x13]);
const POISONS: { type: string; data: Uint8Array; reason: string }[] = [
  { type: "StepCompleted", data: garbage, reason: "undecodable" },
  {
    type: "StepCompleted",
    data: encodeEnvelope({ ...started, type: "StepCompleted" }),
    reason: "type_mismatch",
  },
  {
    type: "StepCompleted",
    data: encodeEnvelope(
      makeEnvelope({
        id: "e-big",
        runId: "poisoned",
        sequence: 3,
        timestampMs: Date.now(),
        tag: "t",
        payload: {
          $case: "stepCompleted",
          value: StepCompleted.fromPartial({
            outcome: {
              stepId: "x",
              step: 2,
              api: Api.API_OPENAI_CHAT_COMPLETIONS,
              usage: { reported: true, inputTokens: 2 ** 60 },
            },
          }),
        },
      }),
    ),
    reason: "out_of_range",
  },
  // Another run's event, put on this run's subject.
  {
    type: "StepStarted",
    data: encodeEnvelope({ ...started, runId: "someone-else" }),
    reason: "wrong_subject",
  },
  // An event whose run sequence jumps past the run's next (its real next is 3).
  {
    type: "StepStarted",
    data: encodeEnvelope({ ...started, id: "e-jump", sequence: 1_000 }),
    reason: "out_of_sequence",
  },
];

describe("projector on a log holding what it cannot use", () => {
  it("sets each aside with its bytes, counted once, and goes on projecting", async () => {
    await call("poisoned", 1);
    const seqs: number[] = [];
    for (const poison of POISONS)
      seqs.push(await publishRaw(natsUrl(), subject("poisoned", poison.type), poison.data));
    // The run's own next event still counts.
    await publishRaw(natsUrl(), subject("poisoned", "StepStarted"), encodeEnvelope(started));
    await call("later", 1);

    // The first try at the batch with the poison in it is cut short before its checkpoint
    // (a crash there): the batch is projected again, its quarantined rows inserted twice.
    let checkpoints = 0;
    const flaky = interceptInserts(async (args, send) => {
      if (args.table === "projection_checkpoints" && checkpoints++ === 0) throw new Error("cut short");
      return send(args);
    });
    const bus = await connectBus({ servers: natsUrl(), prefix, name: "projector-quarantine" });
    const projector = new Projector({
      bus,
      analytics: flaky,
      log,
      consumer: "proj",
      batchSize: 100,
      lingerMs: 100,
      leaseMs: LEASE_MS,
    });
    await projector.start();
    try {
      await waitFor(async () => (await totals()).steps === 2 && (await drained(bus, "proj")), {
        timeoutMs: 15_000,
        message: "the calls after the poison were not projected",
      });
      expect(await totals()).toEqual({ ...totalsOf(2), events: 5, run_steps: 3 });
      const events = await runSql(
        analytics,
        "SELECT run_seq, event_id FROM events WHERE run_id = 'poisoned' ORDER BY run_seq",
        { maxRows: 10 },
      );
      expect(events.rows.map((row) => row.run_seq)).toEqual([1, 2, 3]);
      expect(events.rows[2]).toMatchObject({ event_id: "e-start" });
      const rows = await runSql(
        analytics,
        "SELECT stream_seq, subject, run_id, type, reason, data_base64, bytes, stored_at FROM quarantined_events ORDER BY stream_seq",
        { maxRows: 10 },
      );
      expect(rows.rows).toEqual(
        POISONS.map((poison, i) => ({
          stream_seq: seqs[i],
          subject: subject("poisoned", poison.type),
          run_id: "poisoned",
          type: poison.type,
          reason: poison.reason,
          data_base64: Buffer.from(poison.data).toString("base64"),
          bytes: poison.data.length,
          stored_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2} /),
        })),
      );
      expect(checkpoints).toBeGreaterThan(1);
      expect(projector.status.quarantined).toEqual({
        total: 5,
        by_reason: {
          undecodable: 1,
          invalid_envelope: 0,
          type_mismatch: 1,
          out_of_range: 1,
          wrong_subject: 1,
          out_of_sequence: 1,
        },
      });
      expect(projector.status.lastError).toBeNull();
    } finally {
      await projector.stop();
      await bus.close();
    }

    // A projector started later counts what the projection holds, not what it saw itself.
    const busB = await connectBus({ servers: natsUrl(), prefix, name: "projector-quarantine-b" });
    const b = new Projector({
      bus: busB,
      analytics,
      log,
      consumer: "proj",
      batchSize: 100,
      leaseMs: LEASE_MS,
    });
    await b.start();
    try {
      expect(b.status.quarantined.total).toBe(5);
    } finally {
      await b.stop();
      await busB.close();
    }
  });

  it("projects a batch whose events' own timestamps span more than 100 months (ClickHouse's default for one insert)", async () => {
    const month = (i: number) => Date.UTC(2030, i, 1);
    for (let i = 0; i < 101; i++) {
      await append(
        "months",
        { $case: "stepStarted", value: StepStarted.fromPartial({ stepId: `m${i}`, step: i + 1 }) },
        month(i),
      );
    }
    const bus = await connectBus({ servers: natsUrl(), prefix, name: "projector-months" });
    const projector = new Projector({
      bus,
      analytics,
      log,
      consumer: "proj",
      batchSize: 500,
      lingerMs: 100,
      leaseMs: LEASE_MS,
    });
    await projector.start();
    try {
      const count = "SELECT count() AS n FROM events WHERE run_id = 'months'";
      await waitFor(async () => Number((await runSql(analytics, count, { maxRows: 1 })).rows[0]?.n) === 101, {
        timeoutMs: 15_000,
        message: "the batch was not projected",
      });
      expect(projector.status.lastError).toBeNull();
    } finally {
      await projector.stop();
      await bus.close();
    }
  });
});
