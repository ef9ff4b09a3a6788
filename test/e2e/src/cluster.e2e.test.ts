import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { type Bus, BusError } from "@holdfast/bus";
import {
  type Actor,
  ActorKind,
  createIdGenerator,
  describeRun,
  type RunCommand,
  type RunState,
  type StoredEnvelope,
} from "@holdfast/events";
import { createLogger } from "@holdfast/log";
import { Ledger, runAggregate } from "@holdfast/runs";
import {
  type ClusterNode,
  makeCertificates,
  makeTempDir,
  type NatsCluster,
  startCluster,
  uniqueNamespace,
  waitFor,
} from "@holdfast/test-harness";
import type OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectAs, makeCredentials } from "./secured.js";
import { type Stack, startStack } from "./stack.js";

// Holdfast on a three-server JetStream cluster, its log at three replicas, losing a server
// under load: what a client was answered is in the log once, the projection agrees with the
// log, and holds still work across gateways while the cluster runs on two servers.
let cluster: NatsCluster;
let stack: Stack;
let operatorBus: Bus;
let dir: Awaited<ReturnType<typeof makeTempDir>>;
/** The event stream's leader, and the one server Holdfast's connections are made to: the one killed. */
let victim: ClusterNode;
const operator: Actor = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "test" };
const NO_LABELS = { tag: "", tenant: "" };

beforeAll(async () => {
  dir = await makeTempDir("cluster");
  const prefix = uniqueNamespace("cluster");
  // As a deployment runs it between hosts: every client with its own credential, and the
  // servers' routes with theirs, over TLS with each server verifying the other.
  const credentials = await makeCredentials(dir.path, { prefix, projectorConsumer: "projector" });
  const certs = await makeCertificates(dir.path);
  cluster = await startCluster({
    nodes: 3,
    accounts: credentials.accounts,
    routes: {
      user: "holdfast-route",
      password: randomBytes(24).toString("base64url"),
      tls: { certFile: certs.serverCertFile, keyFile: certs.serverKeyFile, caFile: certs.caFile },
    },
  });
  const admin = await connectAs("admin", { servers: cluster.urls, prefix, replicas: 3, credentials });
  // The log exists before the stack (the admin provisions it, as `holdfast up` does), so
  // its leader is known: the stack connects there, and losing that server costs both an
  // election and every connection. nats.url takes one URL (no list); the connections
  // learn the other servers from the cluster and fail over to them.
  await admin.provision();
  await admin.provisionBuckets();
  victim = await cluster.streamLeader(admin.eventsStream);
  await admin.close();
  // An operator's commands go as the control service's.
  operatorBus = await connectAs("control", { servers: cluster.urls, prefix, replicas: 3, credentials });
  stack = await startStack({ nats: { url: victim.url, replicas: 3, prefix, credentials } });
});
afterAll(async () => {
  await operatorBus?.close();
  await stack?.close();
  await cluster?.stop();
  await dir?.[Symbol.asyncDispose]();
});

/** What one call of the load got back. */
type CallResult =
  | { ok: true; run: string; stream: boolean; startedMs: number; endedMs: number; responseId: string }
  | { ok: false; run: string; startedMs: number; status: number | undefined; message: string };

const RUNS = ["cl-run-a", "cl-run-b", "cl-run-c", "cl-run-d"];
const HELD_RUN = "cl-held";

/**
 * Calls until stopped, two workers per run, each alternating between the two gateways, a
 * third of them streamed. Every body is distinct, so every answer has its own id.
 */
function startLoad(gateways: ((run: string) => OpenAI)[]) {
  const results: CallResult[] = [];
  let stopped = false;
  const worker = async (run: string, offset: number) => {
    for (let i = 0; !stopped && i < 2_000; i++) {
      const client = gateways[(i + offset) % gateways.length]!(run);
      const content = `${run} worker ${offset} call ${i}`;
      const startedMs = Date.now();
      try {
        let responseId: string;
        if (i % 3 === 0) {
          const stream = await client.chat.completions.create({
            model: "gpt-4o-mini",
            stream: true,
            messages: [{ role: "user", content }],
          });
          responseId = "";
          for await (const chunk of stream) responseId = chunk.id;
        } else {
          responseId = (
            await client.chat.completions.create({
              model: "gpt-4o-mini",
              messages: [{ role: "user", content }],
            })
          ).id;
        }
        results.push({ ok: true, run, stream: i % 3 === 0, startedMs, endedMs: Date.now(), responseId });
      } catch (error) {
        const status = (error as { status?: number }).status;
        results.push({ ok: false, run, startedMs, status, message: (error as Error).message });
        // A refused call (the log is electing a leader) is retried by an agent after a pause.
        await sleep(100);
      }
    }
  };
  const workers = RUNS.flatMap((run) => [worker(run, 0), worker(run, 1)]);
  return {
    results,
    succeededSince: (ms: number) => results.filter((r) => r.ok && r.startedMs >= ms).length,
    stop: async () => {
      stopped = true;
      await Promise.all(workers);
    },
  };
}

/** Executes an operator command, again while the log is unreachable (a retry that had landed decides nothing new). */
async function operate(ledger: Ledger<RunState, RunCommand>, runId: string, command: RunCommand) {
  return waitFor(
    () =>
      ledger.execute(runId, NO_LABELS, command).catch((error: unknown) => {
        if (error instanceof BusError && error.retryable) return undefined;
        throw error;
      }),
    { timeoutMs: 20_000, message: `the log to take ${command.type}` },
  );
}

async function history(runId: string): Promise<StoredEnvelope[]> {
  return (await stack.bus.readRun(runId)).events.map((event) => event.envelope);
}

describe("Holdfast on a three-server NATS cluster", () => {
  it("loses no answered call, records none twice, and parks and resumes a hold when one server is killed", async () => {
    expect((await stack.bus.streamConfig()).replicas).toBe(3);
    const other = await stack.extraGateway({});
    const gateways = [
      (run: string) => stack.client({ headers: { "X-Holdfast-Run": run } }),
      (run: string) => other.client({ "X-Holdfast-Run": run }),
    ];
    // The run that is held later has a call before the kill, through the first gateway.
    await gateways[0]!(HELD_RUN).chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "before the hold" }],
    });

    const load = startLoad(gateways);
    let killedMs = 0;
    try {
      await waitFor(() => load.succeededSince(0) >= 40, {
        timeoutMs: 20_000,
        message: "calls before the kill",
      });

      expect((await cluster.streamLeader(stack.bus.eventsStream)).name).toBe(victim.name);
      killedMs = Date.now();
      await victim.kill("SIGKILL");
      await waitFor(() => load.succeededSince(killedMs) >= 40, {
        timeoutMs: 30_000,
        message: "calls answered after the kill",
      });
      const answeredAfter = load.results.flatMap((r) => (r.ok && r.startedMs >= killedMs ? [r.endedMs] : []));
      console.log(
        `killed ${victim.name} (the event stream's leader, and the server Holdfast was connected to); ` +
          `the first call started after it was answered ${Math.min(...answeredAfter) - killedMs} ms after the kill`,
      );

      // A hold issued on two servers parks a call on the other gateway until it is resumed.
      const ledger = new Ledger<RunState, RunCommand>({
        aggregate: runAggregate,
        bus: operatorBus,
        log: createLogger({ name: "operator", level: "silent" }),
        clock: Date.now,
        newId: createIdGenerator(),
      });
      await operate(ledger, HELD_RUN, { type: "HoldRun", actor: operator, reason: "cluster test" });
      const { data: parked, response } = await gateways[1]!(HELD_RUN)
        .chat.completions.create({
          model: "gpt-4o-mini",
          stream: true,
          messages: [{ role: "user", content: "while held" }],
        })
        .withResponse();
      expect(response.status).toBe(200);
      expect(response.headers.get("x-holdfast-held")).toBe("true");
      const chunks = parked[Symbol.asyncIterator]();
      const first = chunks.next();
      const settled = await Promise.race([first.then(() => "answered"), sleep(1_000, "pending")]);
      expect(settled).toBe("pending");
      const whileHeld = await stack.run(HELD_RUN);
      expect(whileHeld.status).toBe("held");
      expect(whileHeld.parked).toBe(1);
      // Nothing started, so nothing charged, while the run is held.
      expect(whileHeld.steps).toHaveLength(1);

      await operate(ledger, HELD_RUN, { type: "ResumeRun", actor: operator, reason: "", onlyIfHeld: false });
      // Bounded, so a call left parked fails here rather than as the test's timeout.
      const released = await Promise.race([first, sleep(15_000, undefined)]);
      expect(released, "the parked call went on within 15 s of the resume").toBeDefined();
      let text = "";
      let answerId = "";
      for (let next = released!; !next.done; next = await chunks.next()) {
        text += next.value.choices[0]?.delta.content ?? "";
        answerId = next.value.id;
      }
      expect(text).toBe("Fake reply to: while held");
      const held = await waitFor(
        async () => {
          const run = await stack.run(HELD_RUN);
          return run.steps.find((s) => s.responseId === answerId && s.status === "completed")
            ? run
            : undefined;
        },
        { timeoutMs: 20_000, message: "the resumed call's outcome in the log" },
      );
      expect(held.control.map((c) => c.what)).toEqual(["held", "parked", "resumed", "unparked"]);
      // Parked and answered on the other gateway than the one that served the run before.
      const parkedOn = held.control.find((c) => c.what === "parked")?.gateway;
      expect(held.steps.map((s) => s.gateway === parkedOn)).toEqual([false, true]);
    } finally {
      await load.stop();
    }

    // Every answer the clients got is a StepCompleted in the log, exactly once.
    const answered = load.results.flatMap((r) => (r.ok ? [r] : []));
    const failed = load.results.flatMap((r) => (r.ok ? [] : [r]));
    const logs = new Map<string, StoredEnvelope[]>();
    const unrecorded = async () => {
      for (const run of [...RUNS, HELD_RUN]) logs.set(run, await history(run));
      const recorded = new Set(
        [...logs.values()]
          .flat()
          .flatMap((e) =>
            e.payload?.$case === "stepCompleted" ? [e.payload.value.outcome?.responseId] : [],
          ),
      );
      return answered.filter((r) => !recorded.has(r.responseId));
    };
    // Outcomes are appended after the answer, and retried while the log is unreachable.
    await waitFor(async () => (await unrecorded()).length === 0, { timeoutMs: 20_000 }).catch(() => {});
    expect(
      (await unrecorded()).map((r) => ({
        ...r,
        startedMs: r.startedMs - killedMs,
        endedMs: r.endedMs - killedMs,
      })),
    ).toEqual([]);
    const failures = new Map<string, number>();
    for (const r of failed) {
      const what = `${r.status ?? "no status"}: ${r.message}`;
      failures.set(what, (failures.get(what) ?? 0) + 1);
    }
    console.log(
      `${answered.length} calls answered, ${failed.length} failed` +
        [...failures].map(([what, n]) => `\n  ${n} × ${what}`).join(""),
    );

    const totals = { steps: 0, input: 0, output: 0, costNanoUsd: 0 };
    for (const [run, events] of logs) {
      // One history per run, numbered without gaps, nothing appended twice.
      expect(events.map((e) => e.sequence)).toEqual(events.map((_, i) => i + 1));
      expect(new Set(events.map((e) => e.id)).size).toBe(events.length);
      const outcomes = events.flatMap((e) =>
        e.payload?.$case === "stepCompleted" || e.payload?.$case === "stepFailed"
          ? [e.payload.value.outcome]
          : [],
      );
      expect(new Set(outcomes.map((o) => o?.stepId)).size).toBe(outcomes.length);
      const answeredHere = answered.filter((r) => r.run === run).map((r) => r.responseId);
      const completedIds = outcomes.map((o) => o?.responseId);
      for (const id of answeredHere) expect(completedIds.filter((c) => c === id)).toHaveLength(1);

      const view = describeRun(run, events);
      totals.steps += view.completed + view.failed;
      totals.input += view.totals.inputTokens;
      totals.output += view.totals.outputTokens;
      totals.costNanoUsd += view.totals.costNanoUsd;
    }

    // The projection, through the failover, says what the log says.
    const projected = async () => {
      const [row] = await stack.sql<Record<keyof typeof totals, string | number>>(
        "SELECT count() AS steps, sum(input_tokens) AS input, sum(output_tokens) AS output, " +
          "toString(sum(ifNull(cost_usd, 0)) * 1000000000) AS costNanoUsd FROM steps",
      );
      return Object.fromEntries(Object.entries(row ?? {}).map(([key, value]) => [key, Number(value)]));
    };
    expect(totals.steps).toBeGreaterThan(80);
    // A projector whose pull went to the lost server notices by two missed heartbeats (5 s);
    // the margin is for a loaded machine.
    await expect.poll(projected, { timeout: 40_000, interval: 250 }).toEqual(totals);

    // The killed server comes back on its store and catches up with the log.
    await victim.restart();
    const state = await stack.bus.streamState();
    await expect
      .poll(() => victim.stream(stack.bus.eventsStream), { timeout: 10_000 })
      .toMatchObject({ messages: state.messages, lastSeq: state.lastSeq });
  });
});
