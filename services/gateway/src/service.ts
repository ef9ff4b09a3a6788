import { randomBytes } from "node:crypto";
import { setMaxListeners } from "node:events";
import { hostname } from "node:os";
import { presentedToken } from "@holdfast/access";
import { connectBus, type SwitchError } from "@holdfast/bus";
import { type Config, natsConnection } from "@holdfast/config";
import {
  createIdGenerator,
  type FleetCommand,
  type FleetState,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import { ToolGate } from "@holdfast/gate";
import { connect } from "@holdfast/grpc";
import { counter, gauge, listenOn, logReaderMetrics, renderMetrics } from "@holdfast/http";
import type { Logger } from "@holdfast/log";
import {
  type AcquireRequest,
  type AcquireResponse,
  BudgetClient,
  RateWindowsClient,
  type ReleaseRequest,
  type ReserveResponse,
  type SliceGranted,
} from "@holdfast/proto";
import { createPricer } from "@holdfast/providers";
import { fleetAggregate, HeldRuns, Ledger, LogFollower, runAggregate } from "@holdfast/runs";
import { SnapshotWriter } from "@holdfast/snapshots";
import type { FastifyInstance } from "fastify";
import { buildApp } from "./app.js";
import { budgetFeature } from "./budget/feature.js";
import { gateFeature } from "./gate/feature.js";
import { healthReaders } from "./health/access.js";
import { Admission } from "./hold/admission.js";
import { holdFeature } from "./hold/feature.js";
import { PARKING_BOUNDS, ParkingLot } from "./hold/lot.js";
import { Generations } from "./identify/generations.js";
import { runResolver } from "./identify/resolve.js";
import { ResponseIndex } from "./identify/responses.js";
import { Liveness } from "./liveness/liveness.js";
import { Reaper } from "./liveness/reaper.js";
import { callSnapshots } from "./pipeline/capture.js";
import type { GatewayFeature } from "./pipeline/hooks.js";
import { inOrder } from "./pipeline/order.js";
import { originReader } from "./pipeline/origin.js";
import { Waiting } from "./pipeline/wait.js";
import { predictFeature } from "./predict/feature.js";
import { type RateWindowsApi, type Reservation, SharedSlices } from "./predict/shared.js";
import { pricingFeature } from "./pricing/feature.js";
import { passthroughRunNamer } from "./proxy/govern.js";
import { routingFeature } from "./routing/feature.js";
import { Router, routesFrom } from "./routing/router.js";
import { TenantKeys } from "./tenants/keys.js";
import { Upstreams } from "./upstream/upstream.js";

export interface RunningGateway {
  /** Base URL agents use, e.g. http://127.0.0.1:4141/v1. */
  baseUrl: string;
  port: number;
  /**
   * The HTTP app, for tests that drive the gateway in-process (`app.inject`) as it is wired
   * here; agents use `baseUrl`.
   */
  app: FastifyInstance;
  /** Stops taking calls, lets the ones in flight finish, records their outcomes, disconnects. */
  close(): Promise<void>;
}

export interface GatewayOptions {
  /** Features deciding at the pipeline's hooks, in order. */
  features?: readonly GatewayFeature[];
}

/** Wires the gateway from configuration. `main.ts` adds process signals around it. */
export async function startGateway(
  config: Config,
  log: Logger,
  options: GatewayOptions = {},
): Promise<RunningGateway> {
  if (!config.nats.url)
    throw new Error("nats.url is not set: the gateway needs a NATS server (holdfast up sets it)");
  const clock = Date.now;
  const instanceId = config.gateway.instance_id ?? `${hostname()}-${process.pid}`;
  const bus = await connectBus({
    ...natsConnection(config.nats),
    name: `holdfast-gateway ${instanceId}`,
    principal: "gateway",
    deferMs: config.gateway.outcome_defer_ms,
    log,
  });
  await bus.provision();
  const newId = createIdGenerator(clock);
  const ledger = new Ledger<RunState, RunCommand>({
    aggregate: runAggregate,
    bus,
    log,
    clock,
    newId,
    // A run another gateway serves too is heard as its events are stored.
    tail: (runId, handler) => bus.tail(runId, handler),
  });
  const fleet = new Ledger<FleetState, FleetCommand>({ aggregate: fleetAggregate, bus, log, clock, newId });
  const held = new HeldRuns(bus);
  // One watch for the process, started before any state is read, so nothing falls between.
  // Every other event is followed too while another gateway is alive (below).
  // What a watch switched on and off with the fleet (below) failed to do.
  const switchFailed =
    (what: string): SwitchError =>
    (error, during) =>
      log.warn(
        { err: error },
        during === "start" ? `could not start ${what}; trying again` : `could not stop ${what}`,
      );
  const follower = new LogFollower(bus, [ledger, fleet, held], {
    onError: switchFailed("following every event of the log"),
  });
  await follower.start();
  await held.load();
  const generations = new Generations({
    kv: await bus.keyValue("FINGERPRINTS"),
    runState: (runId) => ledger.current(runId),
    clock,
    idleMs: config.identification.idle_minutes * 60_000,
  });
  await generations.start();
  const responses = new ResponseIndex(
    await bus.keyValue("RESPONSES"),
    (key, value) => bus.putValue("RESPONSES", key, value),
    { onError: switchFailed("watching the response index") },
  );
  const snapshots = config.snapshots.enabled ? await snapshotWriter(bus, config, log) : undefined;
  // A process id that a restart of the same instance does not reuse: the calls the dead
  // process had in flight are told apart from this one's.
  const gatewayId = `${instanceId}#${randomBytes(3).toString("hex")}`;
  const liveness = new Liveness(
    await bus.keyValue("GATEWAYS"),
    gatewayId,
    config.gateway.heartbeat_ms,
    clock,
  );
  await liveness.start();
  // Alone in the fleet, this gateway appends its runs' calls itself and is told of an
  // operator's hold or a gate's decision as each is stored: it does not read every event
  // back from the log (each would cost it and nats-server a delivery per event). While
  // another gateway is alive, every event is followed, and the response index watched, so
  // that a run or a response both serve is current on each without a conflict.
  await liveness.watchPeers((present) => {
    log.info(
      { peers: present },
      present
        ? "another gateway is alive: following every event"
        : "alone in the fleet: following urgent events only",
    );
    // Starting at the log's end, or dropping what was not yet pulled, the watch may have
    // missed another writer's last events: every run held here is read before it is next
    // decided on.
    void follower.followEverything(present).then(() => ledger.suspectAll());
    void responses.watch(present);
  });
  const pricer = createPricer({
    overrides: config.prices,
    unknownUsdPerMtok: config.pricing.unknown_usd_per_mtok,
  });
  // Aborted first thing on close: parked calls are answered "retry", not waited on. Every
  // parked call listens to it (thousands may be), which is no leak: each stops when it goes on.
  const shutdown = new AbortController();
  setMaxListeners(0, shutdown.signal);
  const lot = new ParkingLot({
    perRun: config.hold.max_parked_per_run,
    perGateway: config.hold.max_parked,
    bytes: config.hold.max_parked_bytes,
  });
  const admission = new Admission({
    ledger,
    fleet,
    held,
    pricer,
    limits: config,
    newId,
    gateway: gatewayId,
    keepaliveMs: config.hold.keepalive_ms,
    keepalive1xx: config.hold.keepalive_1xx,
    clock,
    onRecordError: (error, runId) => log.error({ err: error, runId }, "could not record a parked call"),
    shutdown: shutdown.signal,
    lot,
  });
  await admission.start();
  // Waiting in place and parking, as the pipeline offers them to its features.
  const waiting = new Waiting(
    {
      ledger,
      keepaliveMs: config.hold.keepalive_ms,
      keepalive1xx: config.hold.keepalive_1xx,
      shutdown: shutdown.signal,
    },
    (call, labels) => admission.park(call, labels),
  );
  const reaper = new Reaper({
    bus,
    ledger,
    liveness,
    pricer,
    costControlled: (runId, tag) => admission.costControlled(runId, tag),
    log,
    intervalMs: config.gateway.heartbeat_ms * 3,
  });
  reaper.start();
  const upstreams = new Upstreams({
    upstream: config.gateway.upstream,
    byShape: config.gateway.upstreams,
    timeoutMs: config.gateway.upstream_timeout_ms,
    connections: config.gateway.upstream_connections,
  });
  const rules = {
    headers: config.identification.headers,
    bodyFields: config.identification.body_fields,
    traceparent: config.identification.traceparent,
    tagHeaders: config.identification.tag_headers,
    tagFields: config.identification.tag_fields,
    tenantHeaders: config.identification.tenant_headers,
  };
  // Budgets across runs, when any is configured, through the budget service's leases.
  const budgetKeys = Object.keys(config.budgets);
  const budgets =
    budgetKeys.length === 0 ? undefined : budgetFeatureFor(config, gatewayId, ledger, clock, budgetKeys);
  // The tool-call gate, when any rule or loop detection is configured.
  const toolGate = new ToolGate(config);
  const gate = toolGate.off
    ? undefined
    : gateFeature({
        gate: toolGate,
        ledger,
        newId,
        gateway: gatewayId,
      });
  // One window per provider key for the whole fleet, kept by the budget service's coordinator.
  const shared =
    config.predict.enabled && config.predict.shared && config.budget.url !== undefined
      ? new SharedSlices({
          api: rateWindowsApi(config.budget.url, config.predict.max_wait_s * 1_000, budgetMetadata(config)),
          gateway: gatewayId,
          clock,
          sliceMs: config.predict.slice_ms,
          onAvailability: (up, error) =>
            up
              ? log.info("the rate-limit coordinator answers again: windows are shared")
              : log.warn(
                  { err: error },
                  "the rate-limit coordinator cannot be reached: this gateway decides from its own readings",
                ),
        })
      : undefined;
  // Rate-limit prediction: every answer's headers read, each call decided before forward.
  const predict = config.predict.enabled
    ? predictFeature({
        config: config.predict,
        ledger,
        keyEvents: bus,
        limitsFor: (tag) => admission.limitsFor(tag),
        gateway: gatewayId,
        newId,
        clock,
        log,
        keepaliveMs: config.hold.keepalive_ms,
        keepalive1xx: config.hold.keepalive_1xx,
        shutdown: shutdown.signal,
        summaryTimeoutMs: config.gateway.upstream_timeout_ms,
        maxAnswerBytes: config.gateway.max_answer_bytes,
        ...(shared === undefined ? {} : { shared }),
      })
    : undefined;
  await predict?.start();
  // Model aliases served by several upstreams: each call where its window has the most headroom.
  const routes = routesFrom(config.routes, process.env);
  const routing =
    routes.size === 0
      ? undefined
      : routingFeature({
          router: new Router(routes, {
            breakerFailures: config.routing.breaker_failures,
            breakerOpenMs: config.routing.breaker_open_s * 1_000,
            cooldownMs: config.routing.cooldown_s * 1_000,
          }),
          upstreams,
          clock,
          ...(predict === undefined ? {} : { roomOf: predict.roomOf }),
        });
  const metrics = [
    ...logReaderMetrics("gateway", () => bus.quarantineCounts),
    gauge({
      name: "holdfast_parked_calls",
      help: "Calls of held runs this gateway keeps parked now.",
      labels: {},
      value: () => lot.parked,
    }),
    gauge({
      name: "holdfast_parked_bytes",
      help: "Bytes of request bodies the calls parked on this gateway hold now (hold.max_parked_bytes).",
      labels: {},
      value: () => lot.parkedBytes,
    }),
    counter({
      name: "holdfast_snapshots_total",
      help: "Step snapshots (a request's, an answer's) this gateway stored since it started, and those it could not store (the call went on; the step reads as missing).",
      labels: { result: ["stored", "failed"] },
      value: ({ result }) => (snapshots === undefined ? 0 : snapshots.counts[result as "stored" | "failed"]),
    }),
    counter({
      name: "holdfast_parked_calls_refused_total",
      help: "Calls of held runs refused since this gateway started because no parking room was left (hold.max_parked_per_run, hold.max_parked, hold.max_parked_bytes), by the bound reached.",
      labels: { bound: PARKING_BOUNDS },
      value: ({ bound }) => lot.refused[bound as (typeof PARKING_BOUNDS)[number]],
    }),
  ];
  const mayReadHealth = healthReaders({ ...config.control, host: config.gateway.host });
  if (
    config.control.token === undefined &&
    config.control.read_token === undefined &&
    !mayReadHealth(undefined)
  ) {
    log.warn(
      { host: config.gateway.host },
      "the gateway listens off loopback with no token: /holdfast/health shows liveness only and /holdfast/metrics is refused; set control.read_token to read them",
    );
  }
  const app = buildApp({
    log,
    maxBodyBytes: config.gateway.max_body_bytes,
    maxAnswerBytes: config.gateway.max_answer_bytes,
    maxEventBytes: config.gateway.max_event_bytes,
    ...(snapshots === undefined ? {} : { snapshots: callSnapshots(snapshots, config.snapshots.max_bytes) }),
    originOf: originReader({ ...config.control, host: config.gateway.host }),
    limits: config.http,
    ledger,
    upstreams,
    pricer,
    instanceId: gatewayId,
    newId,
    resolveRun: runResolver(rules, generations, responses),
    // With tenants configured, a call's tenant is its gateway key's, never a header's.
    ...(Object.keys(config.tenants).length === 0 ? {} : { tenantKeys: new TenantKeys(config.tenants) }),
    responses,
    admission,
    limitsFor: (tag) => admission.limitsFor(tag),
    rules: () => admission.rules(),
    costControlled: (runId, tag) => admission.costControlled(runId, tag),
    onTrip: admission.onTrip,
    waiting,
    passthrough: { mode: config.gateway.passthrough, runOf: passthroughRunNamer(rules) },
    logConnected: () => bus.connected,
    onRecordError: (error, runId) => log.error({ err: error, runId }, "could not record a call's outcome"),
    health: {
      live: () => bus.connected,
      details: () => ({
        nats: bus.connected ? "connected" : "disconnected",
        runs_cached: ledger.cachedCount,
        runs_held: held.count,
        peer_gateways: liveness.peersAlive,
        log_followed: follower.followingEverything ? "every_event" : "urgent_events",
        // Events of the log this process set aside (and went on past) since it started.
        quarantined: bus.quarantineCounts,
        parked: lot.parked,
        // Calls of held runs refused for want of parking room, by the bound reached.
        parked_refused: lot.refused,
      }),
      mayRead: mayReadHealth,
      metrics: () => renderMetrics(metrics),
    },
    // In the one declared order (pipeline/order.ts); the embedder's own after them.
    features: [
      ...inOrder({
        routing,
        pricing: pricingFeature({
          reserve: (...reservation) => admission.reserve(...reservation),
          unknown: config.pricing.unknown,
        }),
        predict: predict?.feature,
        budget: budgets?.feature,
        hold: holdFeature({ admission }),
        gate,
      }),
      ...(options.features ?? []),
    ],
  });
  const port = await listenOn(app, {
    host: config.gateway.host,
    port: config.gateway.port,
    freePortIfTaken: config.free_port_if_taken,
  });
  const host = config.gateway.host === "0.0.0.0" ? "127.0.0.1" : config.gateway.host;
  log.info({ port, upstream: config.gateway.upstream, gateway: gatewayId }, "gateway listening");
  return {
    baseUrl: `http://${host}:${port}/v1`,
    port,
    app,
    async close() {
      shutdown.abort();
      await predict?.close();
      await reaper.stop();
      await app.close();
      await budgets?.close();
      await shared?.close();
      await ledger.drain();
      await fleet.drain();
      await follower.stop();
      generations.stop();
      await responses.stop();
      await liveness.stop();
      await upstreams.close();
      await bus.close();
    },
  };
}

function budgetFeatureFor(
  config: Config,
  gateway: string,
  ledger: Ledger<RunState, RunCommand>,
  clock: () => number,
  keys: string[],
) {
  if (config.budget.url === undefined) {
    throw new Error(
      "budgets are configured but budget.url is not set: the gateway needs the budget service (holdfast up starts one and sets it)",
    );
  }
  const client = connect(BudgetClient, {
    address: config.budget.url,
    deadlineMs: 5_000,
    metadata: budgetMetadata(config),
  });
  const acquire = (request: AcquireRequest) =>
    new Promise<AcquireResponse>((resolve, reject) => {
      client.acquire(request, (error, response) => (error === null ? resolve(response) : reject(error)));
    });
  const release = (request: ReleaseRequest) =>
    new Promise<void>((resolve, reject) => {
      client.release(request, (error) => (error === null ? resolve() : reject(error)));
    });
  return budgetFeature({
    api: {
      acquire,
      release: async (leaseId, reportedNanoUsd) => {
        await release({ leaseId, reportedNanoUsd });
      },
    },
    keysFor: (tag) => {
      const found: string[] = [];
      if (tag !== "" && tag !== "*" && keys.includes(tag)) found.push(tag);
      if (keys.includes("*")) found.push("*");
      return found;
    },
    ledger,
    gateway,
    clock,
  });
}

/** What a gateway presents to the budget service: its token, when one is configured. */
function budgetMetadata(config: Config): Record<string, string> | undefined {
  const token = presentedToken(config.budget.token, "budget.token", "calls the budget service");
  return token === undefined ? undefined : { authorization: `Bearer ${token}` };
}

/** The coordinator's RateWindows over gRPC: a reservation is a server stream, cancelled to leave the queue. */
function rateWindowsApi(
  address: string,
  maxWaitMs: number,
  metadata: Record<string, string> | undefined,
): RateWindowsApi {
  const client = connect(RateWindowsClient, { address, deadlineMs: 5_000, metadata });
  return {
    reserve(request): Reservation {
      const stream = client.reserve(request, { deadline: Date.now() + maxWaitMs + 10_000 });
      let answered = 0;
      let first!: { resolve: (m: ReserveResponse) => void; reject: (e: unknown) => void };
      let turn!: { resolve: (g: SliceGranted) => void; reject: (e: unknown) => void };
      const firstAnswer = new Promise<ReserveResponse>((resolve, reject) => {
        first = { resolve, reject };
      });
      const turnAnswer = new Promise<SliceGranted>((resolve, reject) => {
        turn = { resolve, reject };
      });
      // Whoever does not wait for its turn must not leave an unhandled rejection behind.
      turnAnswer.catch(() => undefined);
      stream.on("data", (message: ReserveResponse) => {
        answered += 1;
        if (answered === 1) first.resolve(message);
        else if (message.outcome?.$case === "granted") turn.resolve(message.outcome.value);
      });
      stream.on("error", (error: unknown) => {
        first.reject(error);
        turn.reject(error);
      });
      stream.on("end", () => {
        first.reject(new Error("the coordinator ended the reservation without an answer"));
        turn.reject(new Error("the coordinator ended the reservation without a turn"));
      });
      return { first: firstAnswer, turn: turnAnswer, cancel: () => stream.cancel() };
    },
    release: (request) =>
      new Promise<void>((resolve, reject) => {
        client.releaseSlice(request, (error) => (error === null ? resolve() : reject(error)));
      }),
  };
}

/**
 * The snapshot writer over its two buckets (made if missing, when this credential may).
 * A failure is logged at most once every ten seconds: a NATS outage fails every write.
 */
async function snapshotWriter(
  bus: Awaited<ReturnType<typeof connectBus>>,
  config: Config,
  log: Logger,
): Promise<SnapshotWriter> {
  await bus.keyValue("SNAPSHOT_PARTS");
  await bus.keyValue("SNAPSHOT_STEPS");
  let loggedMs = 0;
  return new SnapshotWriter({
    putPart: (key, value, deferred) => bus.putValue("SNAPSHOT_PARTS", key, value, { deferred }),
    putManifest: (key, value, deferred) => bus.putValue("SNAPSHOT_STEPS", key, value, { deferred }),
    patterns: config.redact.patterns,
    maxBytes: config.snapshots.max_bytes,
    onFailure: (error, { runId, stepId, side }) => {
      const now = Date.now();
      if (now - loggedMs < 10_000) return;
      loggedMs = now;
      log.warn(
        { err: error, runId, stepId, side: side === "q" ? "request" : "answer" },
        "a step's snapshot could not be stored (the call went on; later failures are counted in holdfast_snapshots_total, not logged, for ten seconds)",
      );
    },
  });
}
