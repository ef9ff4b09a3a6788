import { type Analytics, migrate, openAnalytics, runSql } from "@holdfast/analytics";
import { type Bus, connectBus } from "@holdfast/bus";
import { Api, createIdGenerator, type EventPayload, makeEnvelope, RunSource } from "@holdfast/events";
import { createLogger } from "@holdfast/log";
import { makeTempDir, natsUrl, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Projector } from "./projector.js";

const log = createLogger({ name: "projector-test", level: "silent" });
const newId = createIdGenerator();
const prefix = uniqueNamespace("projector");
let dir: Awaited<ReturnType<typeof makeTempDir>>;
let analytics: Analytics;
let writer: Bus;
const lastSeq = new Map<string, { seq: number; stream: number }>();

beforeAll(async () => {
  dir = await makeTempDir("projector");
  analytics = await openAnalytics({ dataDir: `${dir.path}/ch`, database: "holdfast" });
  await migrate(analytics);
  writer = await connectBus({ servers: natsUrl(), prefix, name: "writer" });
  await writer.provision();
});
afterAll(async () => {
  await writer.close();
  await analytics.close();
  await dir[Symbol.asyncDispose]();
});

async function append(runId: string, payload: EventPayload) {
  const last = lastSeq.get(runId) ?? { seq: 0, stream: 0 };
  const envelope = makeEnvelope({
    id: newId(),
    runId,
    sequence: last.seq + 1,
    timestampMs: Date.now(),
    tag: "t",
    payload,
  });
  const { streamSequence } = await writer.append(envelope, last.stream);
  lastSeq.set(runId, { seq: last.seq + 1, stream: streamSequence });
}

/** One model call: started, then completed with 10 input tokens and a cost of 7 nano-dollars. */
async function call(runId: string, step: number) {
  const stepId = `${runId}-${step}`;
  const api = Api.API_OPENAI_CHAT_COMPLETIONS;
  await append(runId, {
    $case: "stepStarted",
    value: {
      stepId,
      step,
      api,
      model: "gpt-4o-mini",
      stream: false,
      identity: { source: RunSource.RUN_SOURCE_HEADER, key: "x-run-id", fingerprint: "", generation: 0 },
      messageCount: step,
      upstream: "http://fake",
      gateway: "test",
    },
  });
  await append(runId, {
    $case: "stepCompleted",
    value: {
      stepId,
      step,
      api,
      model: "gpt-4o-mini",
      upstreamStatus: 200,
      usage: { reported: true, inputTokens: 10, outputTokens: 3, cachedInputTokens: 0 },
      cost: { known: true, nanoUsd: 7 },
      latencyMs: 5,
      firstByteMs: 2,
      finishReason: "stop",
      toolCalls: [],
      stream: false,
    },
  });
}

async function totals() {
  const result = await runSql(
    analytics,
    "SELECT (SELECT count() FROM events) AS events, count() AS steps, sum(input_tokens) AS input, toString(sum(cost_usd)) AS cost FROM steps",
    { maxRows: 1 },
  );
  return result.rows[0] as { events: number; steps: number; input: number; cost: string };
}

async function drained(bus: Bus, consumer: string) {
  const info = await bus.jsm.consumers.info(bus.eventsStream, consumer);
  return info.num_pending === 0 && info.num_ack_pending === 0;
}

describe("projector", () => {
  it("projects every event once even when it dies between the insert and the ack", async () => {
    for (let i = 1; i <= 30; i++) await call(`run-${i % 3}`, i);

    // Projector A inserts its first batch, then freezes before acknowledging it, like a
    // process killed at exactly the wrong moment.
    const busA = await connectBus({ servers: natsUrl(), prefix, name: "projector-a" });
    let froze!: () => void;
    const frozen = new Promise<void>((resolve) => {
      froze = resolve;
    });
    const a = new Projector({
      bus: busA,
      analytics,
      log,
      consumer: "proj",
      batchSize: 100,
      ackWaitMs: 1_000,
      afterInsert: () => {
        froze();
        return new Promise<void>(() => {});
      },
    });
    await a.start();
    await frozen;
    await busA.nc.close();
    // The batch is in ClickHouse but JetStream never heard it was done.
    expect(await totals()).toEqual({ events: 60, steps: 30, input: 300, cost: "0.00000021" });

    // Projector B takes over the same durable consumer; the batch comes back after
    // ack_wait and must not be counted again.
    const busB = await connectBus({ servers: natsUrl(), prefix, name: "projector-b" });
    const b = new Projector({
      bus: busB,
      analytics,
      log,
      consumer: "proj",
      batchSize: 100,
      ackWaitMs: 1_000,
    });
    await b.start();
    await waitFor(() => drained(busB, "proj"), {
      timeoutMs: 15_000,
      message: "redelivered batch never acknowledged",
    });
    expect(b.status.eventsProjected).toBe(60);
    expect(await totals()).toEqual({ events: 60, steps: 30, input: 300, cost: "0.00000021" });

    // And it keeps projecting what comes next, exactly once.
    for (let i = 31; i <= 40; i++) await call(`run-${i % 3}`, i);
    await waitFor(async () => (await totals()).steps === 40 && (await drained(busB, "proj")), {
      timeoutMs: 15_000,
      message: "new events not projected",
    });
    expect(await totals()).toEqual({ events: 80, steps: 40, input: 400, cost: "0.00000028" });
    await b.stop();
    await busB.close();
  });

  it("rebuilds run rows that agree with the events", async () => {
    const runs = await runSql(
      analytics,
      "SELECT run_id, steps, completed, input_tokens, status FROM runs ORDER BY run_id",
      {
        maxRows: 10,
      },
    );
    expect(runs.rows).toEqual([
      { run_id: "run-0", steps: 13, completed: 13, input_tokens: 130, status: "idle" },
      { run_id: "run-1", steps: 14, completed: 14, input_tokens: 140, status: "idle" },
      { run_id: "run-2", steps: 13, completed: 13, input_tokens: 130, status: "idle" },
    ]);
  });
});
