import { hostname } from "node:os";
import { AccessPolicy, bindingProblem, RUNS_API, ServiceToken, sameToken } from "@holdfast/access";
import { connectBus } from "@holdfast/bus";
import { type Config, natsConnection } from "@holdfast/config";
import {
  createIdGenerator,
  DURABLE_TYPES,
  type DurablePhase,
  isKnown,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import { type GrpcServer, serve } from "@holdfast/grpc";
import { listenOn, logReaderMetrics, renderMetrics } from "@holdfast/http";
import type { Logger } from "@holdfast/log";
import {
  asOfOfRecorded,
  declaredShapes,
  KeyWindows,
  readingOfRecorded,
  shapesOfRecorded,
} from "@holdfast/predict";
import { FILE_DESCRIPTOR_SET_BASE64 } from "@holdfast/proto";
import { Ledger, LogFollower, runAggregate } from "@holdfast/runs";
import { AgentRegistry } from "./agents/registry.js";
import { runsGrpcService } from "./api/grpc.js";
import { buildRunsApp } from "./api/http.js";
import { CapBook } from "./queue/caps.js";
import { Scheduler } from "./queue/scheduler.js";
import { RunsOperations } from "./runs/operations.js";

export interface RunningScheduler {
  /** host:port of holdfast.v1.Runs (with health and reflection). */
  grpcAddress: string;
  grpcPort: number;
  /** Base URL of the REST API, e.g. http://127.0.0.1:4145. */
  url: string;
  port: number;
  close(): Promise<void>;
}

/** Events that change whether a durable run may run: pushed the moment they are stored. */
const CONTROL = [
  "RunHeld",
  "RunHeldByRule",
  "RunTripped",
  "RunResumed",
  "CheckpointCleared",
  "RunStopped",
] as const;

/**
 * Wires the scheduler from configuration: the runs' ledger (every change of a durable
 * run is its decider's, appended to the log), the agents' deployments, the queue and its
 * workers, and the API (gRPC holdfast.v1.Runs, REST). On start it rebuilds the queue from
 * the log: every durable run not finished or failed is queued again, or, if it was
 * running, left to its worker to claim within a lease.
 */
export async function startScheduler(config: Config, log: Logger): Promise<RunningScheduler> {
  const access = { ...config.control, host: config.scheduler.host };
  const problem = bindingProblem(access, RUNS_API);
  if (problem !== undefined) throw new Error(`The scheduler will not start: ${problem}`);
  const worker = config.scheduler.worker_token;
  if (
    worker !== undefined &&
    [config.control.token, config.control.read_token].some(
      (operators) => operators !== undefined && sameToken(operators, worker),
    )
  ) {
    throw new Error(
      "The scheduler will not start: scheduler.worker_token is the same as control.token or control.read_token: a worker's token must differ from an operator's (a worker may only take runs, an operator may not serve them)",
    );
  }
  if (!config.nats.url)
    throw new Error("nats.url is not set: the scheduler needs a NATS server (holdfast up sets it)");
  const clock = Date.now;
  const newId = createIdGenerator(clock);
  const bus = await connectBus({
    ...natsConnection(config.nats),
    name: `holdfast-scheduler ${hostname()}-${process.pid}`,
    principal: "scheduler",
    log,
  });
  const closers: (() => Promise<void>)[] = [() => bus.close()];
  const closeAll = async () => {
    for (const close of closers.reverse()) await close().catch(() => undefined);
  };
  try {
    await bus.provision();
    const ledger = new Ledger<RunState, RunCommand>({ aggregate: runAggregate, bus, log, clock, newId });
    closers.push(() => ledger.drain());
    const agents = new AgentRegistry(bus, newId, clock);
    await agents.start();
    closers.push(() => agents.stop());

    // Provider keys' windows as gateways read them: a run is not started into one that
    // cannot take its next step.
    const windows = new KeyWindows(undefined, declaredShapes(config.predict.window_shapes));
    const readings = await bus.follow(
      ["RateLimitObserved"],
      (event) => {
        // A reading the bus quarantines informs no decision.
        const envelope = bus.decode(event);
        if (envelope === undefined || !isKnown(envelope) || envelope.payload.$case !== "rateLimitObserved")
          return;
        const observed = envelope.payload.value;
        windows
          .of(observed.keyId, observed.upstream)
          .learn(
            readingOfRecorded(observed, envelope.timestampMs),
            asOfOfRecorded(Number(observed.asOfMs), envelope.timestampMs, clock()),
            envelope.timestampMs,
            shapesOfRecorded(observed),
          );
      },
      { keys: true },
    );
    closers.push(() => readings.stop());

    const scheduler: Scheduler = new Scheduler({
      ledger,
      readRun: async (runId) => (await bus.readRun(runId)).events.map((e) => e.envelope),
      caps: new CapBook(),
      windows,
      clock,
      log,
      leaseMs: config.scheduler.lease_ms,
      // A running run's own events (its model calls), as they are stored.
      tail: (runId) =>
        bus.tail(runId, (event) => {
          ledger.heard(event);
          // Not one this version reads (or one the bus quarantines): nothing to act on.
          const envelope = bus.decode(event);
          if (envelope !== undefined && isKnown(envelope)) scheduler.heard(runId, envelope);
        }),
    });
    closers.push(async () => scheduler.close());
    const operations = new RunsOperations({
      bus,
      ledger,
      scheduler,
      agents,
      newId,
      maxJsonDepth: config.http.max_json_depth,
    });

    // Holds, resumes and stops of durable runs (an operator's, a limit's, a rate-limit checkpoint's).
    const follower = new LogFollower(bus, [
      ledger,
      {
        heard: (event) => {
          if ((CONTROL as readonly string[]).includes(event.type)) {
            void scheduler
              .controlled(event.runId)
              .catch((error: unknown) =>
                log.warn(
                  { err: error, runId: event.runId },
                  "could not act on a durable run's hold or resume",
                ),
              );
          }
        },
      },
    ]);
    await follower.start();
    closers.push(() => follower.stop());

    // The queue as the log has it.
    const recovered = await recover(bus, ledger, scheduler, operations);
    log.info(recovered.counts, "durable runs recovered from the log");

    const policy = new AccessPolicy(access, {
      name: "runs API",
      readOnly: "get, list and watch runs and list agents, not submit, cancel, re-drive, replay or deploy",
    });
    const sessions = new Set<() => void>();
    const grpc: GrpcServer = await serve({
      host: config.scheduler.host,
      port: config.scheduler.grpc_port,
      freePortIfTaken: config.free_port_if_taken,
      services: [
        runsGrpcService({
          operations,
          scheduler,
          access: policy,
          workerToken:
            config.scheduler.worker_token === undefined
              ? undefined
              : new ServiceToken(config.scheduler.worker_token, {
                  api: "the runs API",
                  setting: "scheduler.worker_token",
                }),
          log,
          leaseMs: config.scheduler.lease_ms,
          gatewayUrl: config.scheduler.gateway_url,
          sessions,
        }),
      ],
      health: true,
      reflection: Buffer.from(FILE_DESCRIPTOR_SET_BASE64, "base64"),
    });
    closers.push(() => grpc.close());
    // Workers' sessions end first (they reconnect to whichever scheduler comes next) so the
    // server does not wait out its grace on them.
    closers.push(async () => {
      // Closing, the scheduler lets its workers keep their leases (the next one adopts
      // them as they reconnect) instead of releasing their runs.
      scheduler.close();
      for (const end of [...sessions]) end();
    });
    const metrics = logReaderMetrics("scheduler", () => bus.quarantineCounts);
    const app = buildRunsApp({
      operations,
      access: policy,
      log,
      limits: config.http,
      health: () => ({
        nats: bus.connected ? "connected" : "disconnected",
        pid: process.pid,
        ...scheduler.counts(),
        // Events of the log this process set aside (and went on past) since it started.
        quarantined: bus.quarantineCounts,
      }),
      metrics: () => renderMetrics(metrics),
    });
    const port = await listenOn(app, {
      host: config.scheduler.host,
      port: config.scheduler.port,
      freePortIfTaken: config.free_port_if_taken,
    });
    closers.push(() => app.close());
    const host = reachable(config.scheduler.host);
    const grpcAddress = `${host}:${grpc.port}`;
    const url = `http://${host}:${port}`;
    // Workers can reach this scheduler now: runs found running have a lease's time to be
    // claimed, and each recovered run is held, stopped or resumed as the log says now.
    scheduler.armOrphans();
    for (const runId of recovered.active) {
      void scheduler
        .controlled(runId)
        .catch((error: unknown) =>
          log.warn({ err: error, runId }, "could not act on a recovered run's hold or stop"),
        );
    }
    log.info({ grpc: grpcAddress, url, tokens: policy.required }, "scheduler listening");
    return { grpcAddress, grpcPort: grpc.port, url, port, close: closeAll };
  } catch (error) {
    await closeAll();
    throw error;
  }
}

/**
 * Every durable run in the log: each one not finished or failed is queued again (or, if
 * it was running, given a lease's time for its worker to claim it), and each is listed.
 */
async function recover(
  bus: Awaited<ReturnType<typeof connectBus>>,
  ledger: Ledger<RunState, RunCommand>,
  scheduler: Scheduler,
  operations: RunsOperations,
): Promise<{ counts: { runs: number; queued: number; running: number }; active: string[] }> {
  const last = await bus.lastOnSubjects(DURABLE_TYPES.map((type) => bus.subjects.ofType(type)));
  const latest = new Map<string, { type: string; seq: number }>();
  for (const { envelope, streamSequence } of last) {
    if (envelope.type === "RunSubmitted" && isKnown(envelope) && envelope.payload.$case === "runSubmitted") {
      operations.indexed(envelope.runId, envelope.payload.value.agent, envelope.timestampMs);
    }
    const before = latest.get(envelope.runId);
    if (before === undefined || before.seq < streamSequence)
      latest.set(envelope.runId, { type: envelope.type, seq: streamSequence });
  }
  let queued = 0;
  let running = 0;
  const active: string[] = [];
  for (const [runId, { type }] of latest) {
    if (type === "RunFinished" || type === "RunFailed") continue;
    const state = await ledger.current(runId);
    const phase: DurablePhase | undefined = state.durable?.phase;
    if (phase === "queued") {
      scheduler.enqueue(runId, state);
      queued += 1;
      active.push(runId);
    } else if (phase === "running") {
      scheduler.adoptOrphan(runId, state);
      running += 1;
      active.push(runId);
    }
  }
  return { counts: { runs: latest.size, queued, running }, active };
}

/** Where a client on this machine dials a server bound to `host`. */
function reachable(host: string): string {
  if (host === "0.0.0.0") return "127.0.0.1";
  if (host === "::") return "[::1]";
  return host.includes(":") ? `[${host}]` : host;
}
