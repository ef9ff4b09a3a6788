import { type Analytics, migrate, openAnalytics, runSql } from "@holdfast/analytics";
import { type Bus, connectBus } from "@holdfast/bus";
import { Api, createIdGenerator, type EventPayload, makeEnvelope, RunSource } from "@holdfast/events";
import { createLogger, type Logger } from "@holdfast/log";
import { makeTempDir, natsUrl, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll } from "vitest";
import { Projector } from "./projector.js";

// Shared by the projector's integration tests: a real nats-server stream, embedded
// ClickHouse, and helpers to write model calls into the log and read totals back.

export const log: Logger = createLogger({ name: "projector-test", level: "silent" });
const newId = createIdGenerator();
export const prefix = uniqueNamespace("projector");
let dir: Awaited<ReturnType<typeof makeTempDir>>;
export let analytics: Analytics;
let writer: Bus;
const lastSeq = new Map<string, { seq: number; stream: number }>();

/** Registers the per-file setup and teardown; call once at the top of a test file. */
export function useProjectorFixture(): void {
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
}

export { waitFor };

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
export async function call(runId: string, step: number) {
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

export async function totals() {
  const result = await runSql(
    analytics,
    "SELECT (SELECT count() FROM events) AS events, count() AS steps, sum(input_tokens) AS input, toString(sum(cost_usd)) AS cost FROM steps",
    { maxRows: 1 },
  );
  return result.rows[0] as { events: number; steps: number; input: number; cost: string };
}

export async function drained(bus: Bus, consumer: string) {
  const info = await bus.jsm.consumers.info(bus.eventsStream, consumer);
  return info.num_pending === 0 && info.num_ack_pending === 0;
}

/**
 * Runs a projector that inserts its first batch and then freezes before acknowledging it,
 * like a process killed at exactly the wrong moment, and cuts its NATS connection.
 */
export async function dieBetweenInsertAndAck(options: {
  ackWaitMs: number;
  resetOnStart?: boolean;
}): Promise<void> {
  const bus = await connectBus({ servers: natsUrl(), prefix, name: "projector-that-dies" });
  let froze!: () => void;
  const frozen = new Promise<void>((resolve) => {
    froze = resolve;
  });
  const projector = new Projector({
    bus,
    analytics,
    log,
    consumer: "proj",
    batchSize: 100,
    ...options,
    afterInsert: () => {
      froze();
      return new Promise<void>(() => {});
    },
  });
  await projector.start();
  await frozen;
  await bus.nc.close();
}
