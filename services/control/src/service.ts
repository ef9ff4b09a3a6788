import { hostname } from "node:os";
import { isTokenDigest } from "@holdfast/access";
import { connectBus, type KeyValue } from "@holdfast/bus";
import { type Config, natsConnection } from "@holdfast/config";
import {
  createIdGenerator,
  FLEET,
  type FleetCommand,
  type FleetState,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import { type GrpcServer, serve } from "@holdfast/grpc";
import { listenOn, logReaderMetrics, renderMetrics } from "@holdfast/http";
import type { Logger } from "@holdfast/log";
import { FILE_DESCRIPTOR_SET_BASE64 } from "@holdfast/proto";
import { fleetAggregate, Ledger, LogFollower, runAggregate } from "@holdfast/runs";
import { SnapshotReader } from "@holdfast/snapshots";
import { AccessPolicy, bindingProblem } from "./access/tokens.js";
import { InsecureBindError } from "./errors.js";
import { controlGrpcService } from "./grpc/service.js";
import { API_PREFIX, buildApp } from "./http/app.js";
import { ControlOperations } from "./runs/operations.js";
import { LogRuns, Projection } from "./runs/sources.js";

export interface RunningControl {
  /** Base of the REST API, e.g. http://127.0.0.1:4142/holdfast/v1. */
  url: string;
  port: number;
  /** host:port of the gRPC API (holdfast.v1.Control, health, reflection). */
  grpcAddress: string;
  grpcPort: number;
  /** Stops taking calls, lets those in flight finish, disconnects. */
  close(): Promise<void>;
}

/**
 * Wires the control service from configuration: the REST and gRPC APIs over one set of
 * operations, which append to the log through the runs' and the fleet's ledgers.
 * Refuses to start off loopback without a token unless control.insecure is set.
 */
export async function startControl(config: Config, log: Logger): Promise<RunningControl> {
  const problem = bindingProblem(config.control);
  if (problem !== undefined) throw new InsecureBindError(`The control API will not start: ${problem}`);
  if (!config.nats.url)
    throw new Error("nats.url is not set: the control service needs a NATS server (holdfast up sets it)");
  const clock = Date.now;
  const bus = await connectBus({
    ...natsConnection(config.nats),
    name: `holdfast-control ${hostname()}-${process.pid}`,
    principal: "control",
    log,
  });
  const closers: (() => Promise<void>)[] = [() => bus.close()];
  const closeAll = async () => {
    for (const close of closers.reverse()) await close().catch(() => undefined);
  };
  try {
    await bus.provision();
    const newId = createIdGenerator(clock);
    const runs = new Ledger<RunState, RunCommand>({ aggregate: runAggregate, bus, log, clock, newId });
    const fleet = new Ledger<FleetState, FleetCommand>({ aggregate: fleetAggregate, bus, log, clock, newId });
    // Holds, resumes, rules and gate decisions as they are stored (whoever appended them);
    // a run's calls are read when a command needs the run (Operations reads it fresh).
    const follower = new LogFollower(bus, [runs, fleet]);
    await follower.start();
    closers.push(() => follower.stop());
    closers.push(async () => {
      await runs.drain();
      await fleet.drain();
    });
    await fleet.current(FLEET);

    const analyticsUrl = config.control.analytics_url;
    if (analyticsUrl === undefined) {
      log.warn(
        "control.analytics_url is not set: runs are listed from the log's subject counts, and GET runs is unavailable",
      );
    }
    const presented = analyticsUrl === undefined ? undefined : projectionToken(config);
    if (presented !== undefined && presented === config.control.token) {
      // Reads need no more than the read token: one that may change runs travels only
      // where nothing else was given.
      log.warn(
        "the control service presents control.token to the projector: give it control.read_token (the token, not its digest) so it sends no more than a read needs",
      );
    }
    // Opened when a step is first asked for: a deployment not provisioned for snapshots
    // yet still starts, and says what is missing when one is read.
    let snapshotBuckets: Promise<[KeyValue, KeyValue]> | undefined;
    const buckets = () => {
      snapshotBuckets ??= Promise.all([bus.keyValue("SNAPSHOT_PARTS"), bus.keyValue("SNAPSHOT_STEPS")]);
      snapshotBuckets.catch(() => {
        snapshotBuckets = undefined;
      });
      return snapshotBuckets;
    };
    const operations = new ControlOperations({
      runs,
      fleet,
      log: new LogRuns(bus),
      // A reader per request: what it caches is one step's pieces.
      snapshots: async (runId, stepId) => {
        const [parts, steps] = await buckets();
        return new SnapshotReader(
          async (key) => (await parts.get(key))?.value,
          async (key) => (await steps.get(key))?.value,
        ).step(runId, stepId);
      },
      projection: analyticsUrl === undefined ? undefined : new Projection(analyticsUrl, presented),
    });
    const access = new AccessPolicy(config.control);
    if (!access.required) {
      log.warn({ host: config.control.host }, "the control API has no token: every caller may change runs");
    }

    const metrics = logReaderMetrics("control", () => bus.quarantineCounts);
    const app = buildApp({
      operations,
      access,
      log,
      limits: config.http,
      health: () => ({
        nats: bus.connected ? "connected" : "disconnected",
        pid: process.pid,
        // Events of the log this process set aside (and went on past) since it started.
        quarantined: bus.quarantineCounts,
      }),
      metrics: () => renderMetrics(metrics),
    });
    const port = await listenOn(app, {
      host: config.control.host,
      port: config.control.port,
      freePortIfTaken: config.free_port_if_taken,
    });
    closers.push(() => app.close());

    const grpc: GrpcServer = await serve({
      host: config.control.host,
      port: config.control.grpc_port,
      freePortIfTaken: config.free_port_if_taken,
      services: [controlGrpcService({ operations, access })],
      health: true,
      reflection: Buffer.from(FILE_DESCRIPTOR_SET_BASE64, "base64"),
    });
    closers.push(() => grpc.close());

    const host = reachable(config.control.host);
    const url = `http://${host}:${port}${API_PREFIX}`;
    const grpcAddress = `${host}:${grpc.port}`;
    log.info({ url, grpc: grpcAddress, tokens: access.required }, "control listening");
    return { url, port, grpcAddress, grpcPort: grpc.port, close: closeAll };
  } catch (error) {
    await closeAll();
    throw error;
  }
}

/** Where a client on this machine dials a server bound to `host`. */
function reachable(host: string): string {
  if (host === "0.0.0.0") return "127.0.0.1";
  if (host === "::") return "[::1]";
  return host.includes(":") ? `[${host}]` : host;
}

/**
 * What the control service presents to the projector's analytics API: the read token, or
 * the control token with none. A token given as a digest (sha256:…) can only check one, so
 * with both given that way there is nothing to present, which is said at start.
 */
function projectionToken(config: Config): string | undefined {
  const { read_token, token } = config.control;
  if (read_token === undefined && token === undefined) return undefined;
  const presentable = [read_token, token].find((value) => value !== undefined && !isTokenDigest(value));
  if (presentable !== undefined) return presentable;
  throw new Error(
    "control.read_token and control.token are digests (sha256:…), which can only check a token: the control service presents the read token to the projector (control.analytics_url) and needs it itself",
  );
}
