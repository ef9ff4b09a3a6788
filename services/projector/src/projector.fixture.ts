import { type Analytics, migrate, nanoUsdToDecimal, openAnalytics, runSql } from "@holdfast/analytics";
import { type Bus, connectBus } from "@holdfast/bus";
import {
  Api,
  createIdGenerator,
  type EventPayload,
  makeEnvelope,
  RunSource,
  StepCompleted,
} from "@holdfast/events";
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

/** Lease of the projectors in these tests: short, so a takeover is quick. */
export const LEASE_MS = 1_000;

/** Appends one event to `runId`, next in its sequence. */
export async function append(runId: string, payload: EventPayload, timestampMs = Date.now()) {
  const last = lastSeq.get(runId) ?? { seq: 0, stream: 0 };
  const envelope = makeEnvelope({
    id: newId(),
    runId,
    sequence: last.seq + 1,
    timestampMs,
    tag: "t",
    payload,
  });
  const { streamSequence } = await writer.append(envelope, last.stream);
  lastSeq.set(runId, { seq: last.seq + 1, stream: streamSequence });
}

/**
 * One model call: started, then completed with 10 input tokens and a cost of 7 nano-dollars.
 * Both events are stamped `at` (epoch ms), now by default.
 */
export async function call(runId: string, step: number, at?: number) {
  const stepId = `${runId}-${step}`;
  const api = Api.API_OPENAI_CHAT_COMPLETIONS;
  await append(
    runId,
    {
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
        estimatedInputTokens: 10,
        promptHash: "",
        reservedNanoUsd: 0,
        budgetLeases: [],
        prediction: undefined,
        route: undefined,
        origin: undefined,
      },
    },
    at,
  );
  await append(
    runId,
    {
      $case: "stepCompleted",
      value: StepCompleted.fromPartial({
        outcome: {
          stepId,
          step,
          api,
          model: "gpt-4o-mini",
          upstreamStatus: 200,
          usage: { reported: true, inputTokens: 10, outputTokens: 3, cachedInputTokens: 0 },
          cost: { known: true, nanoUsd: 7 },
          latencyMs: 5,
          firstByteMs: 2,
          stream: false,
        },
        finishReason: "stop",
        toolCalls: [],
      }),
    },
    at,
  );
}

/**
 * A gateway's rate-limit reading of a provider key: an event on the key's own subject, in
 * the same stream as the runs' events but not on the projector's filter.
 */
export async function keyReading(keyId: string) {
  const now = Date.now();
  await writer.appendKeyEvent(
    keyId,
    makeEnvelope({
      id: newId(),
      runId: "",
      sequence: 0,
      timestampMs: now,
      tag: "",
      payload: {
        $case: "rateLimitObserved",
        value: {
          keyId,
          upstream: "http://fake",
          requests: {
            reported: true,
            limit: 500,
            remaining: 499,
            resetAtMs: now + 120,
            shape: "continuous",
            shapeReadings: 3,
          },
          tokens: {
            reported: true,
            limit: 30_000,
            remaining: 29_000,
            resetAtMs: now + 2_000,
            shape: "unknown",
            shapeReadings: 1,
          },
          inputTokens: undefined,
          outputTokens: undefined,
          retryAfterMs: 0,
          gateway: "gw-test",
          asOfMs: now,
        },
      },
    }),
  );
}

/** What a user would check, through the views they query: events, steps and the runs' sums. */
export async function totals() {
  const result = await runSql(
    analytics,
    `SELECT (SELECT count() FROM events) AS events, count() AS steps, sum(input_tokens) AS input,
            toString(sum(cost_usd)) AS cost,
            (SELECT sum(steps) FROM runs) AS run_steps, (SELECT sum(input_tokens) FROM runs) AS run_input
     FROM steps`,
    { maxRows: 1 },
  );
  return result.rows[0] as {
    events: number;
    steps: number;
    input: number;
    cost: string;
    run_steps: number;
    run_input: number;
  };
}

/** The totals of `calls` model calls made with `call`. */
export function totalsOf(calls: number) {
  return {
    events: 2 * calls,
    steps: calls,
    input: 10 * calls,
    cost: nanoUsdToDecimal(7 * calls).replace(/\.?0+$/, ""),
    run_steps: calls,
    run_input: 10 * calls,
  };
}

/**
 * The same ClickHouse, with every insert passed through `hook` (which decides whether and
 * how to send it): a process that dies in the middle of one, or sleeps through its lease.
 */
export function interceptInserts(
  hook: (args: InsertArgs, send: (args: InsertArgs) => Promise<unknown>) => Promise<unknown>,
): Analytics {
  const { client } = analytics;
  const send = (args: InsertArgs) => client.insert(args as never);
  const intercepted = new Proxy(client, {
    get(target, property) {
      if (property === "insert") return (args: InsertArgs) => hook(args, send);
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { ...analytics, client: intercepted };
}

export type InsertArgs = { table: string; columns?: string[]; values: unknown[]; format: string };

/** Connects a bus for one projector of a test, named so `nats server report connections` tells them apart. */
export function projectorBus(name: string): Promise<Bus> {
  return connectBus({ servers: natsUrl(), prefix, name });
}

export async function drained(bus: Bus, consumer: string) {
  const state = await bus.durableState(consumer);
  return state !== undefined && state.pending === 0 && state.ackPending === 0;
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
    lingerMs: 100,
    leaseMs: LEASE_MS,
    ...options,
    afterInsert: () => {
      froze();
      return new Promise<void>(() => {});
    },
  });
  await projector.start();
  await frozen;
  await bus.abandon();
}
