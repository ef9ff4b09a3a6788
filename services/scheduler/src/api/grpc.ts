import { randomUUID } from "node:crypto";
import type * as grpc from "@grpc/grpc-js";
import { type Access, AccessDeniedError, type AccessPolicy, type ServiceToken } from "@holdfast/access";
import { type Actor, Envelope } from "@holdfast/events";
import { type ErrorToStatus, type GrpcStatus, Metadata, type ServedService, unary } from "@holdfast/grpc";
import type { Logger } from "@holdfast/log";
import { type RunsServer, RunsService, type SchedulerMessage, type WorkerMessage } from "@holdfast/proto";
import { PermissionDeniedError, toSchedulerError, UnauthenticatedError } from "../errors.js";
import type { Scheduler, WorkerLink } from "../queue/scheduler.js";
import type { RunsOperations } from "../runs/operations.js";

export interface RunsGrpcDeps {
  operations: RunsOperations;
  scheduler: Scheduler;
  access: AccessPolicy;
  /**
   * What workers present to serve runs (scheduler.worker_token); undefined, they present
   * the control token. Set, the control token may not serve runs, and the worker token may
   * do nothing else.
   */
  workerToken: ServiceToken | undefined;
  log: Logger;
  leaseMs: number;
  gatewayUrl: string | undefined;
  /** Workers' sessions open now: ended when the scheduler closes (a worker reconnects to the next). */
  sessions: Set<() => void>;
}

/**
 * The one mapping of the service's errors onto gRPC status codes (errors.ts holds the
 * codes). The scheduler's own failures are logged: the client sees only their message.
 */
function statusFor(log: Logger): ErrorToStatus {
  return (error) => {
    const known = toSchedulerError(accessError(error));
    if (known.httpStatus >= 500) log.warn({ err: error }, "runs API call failed");
    const metadata = new Metadata();
    metadata.set("holdfast-error-code", known.code);
    return { code: known.grpcStatus, details: known.message, metadata };
  };
}

/**
 * `holdfast.v1.Runs`: clients submit, watch and operate durable runs; workers hold a
 * session (Work) and beat (Heartbeat). The token comes in the `authorization` metadata.
 */
export function runsGrpcService(deps: RunsGrpcDeps): ServedService {
  const { operations, scheduler } = deps;
  const toStatus = statusFor(deps.log);
  const authorize = (metadata: grpc.Metadata, need: Access): Actor => {
    const [value] = metadata.get("authorization");
    return deps.access.authorize(typeof value === "string" ? value : value?.toString("utf8"), need);
  };
  /** A worker's session or beat: the worker token, or (with none configured) the control token. */
  const authorizeWorker = (metadata: grpc.Metadata): void => {
    if (deps.workerToken === undefined) {
      authorize(metadata, "change");
      return;
    }
    const [value] = metadata.get("authorization");
    const presented = typeof value === "string" ? value : value?.toString("utf8");
    let operator = false;
    try {
      deps.access.authorize(presented, "read");
      operator = deps.access.required;
    } catch {
      // Not an operator's token: the worker token's check says what it is.
    }
    if (operator) {
      throw new AccessDeniedError(
        "permission_denied",
        "an operator's token may not serve runs: a worker presents scheduler.worker_token",
      );
    }
    deps.workerToken.check(presented);
  };
  const implementation: RunsServer = {
    submit: unary(async (request, call) => {
      const actor = authorize(call.metadata, "change");
      return operations.submit(request, actor);
    }, toStatus),
    get: unary(async (request, call) => {
      authorize(call.metadata, "read");
      return operations.get(request.runId);
    }, toStatus),
    list: unary(async (request, call) => {
      authorize(call.metadata, "read");
      return { runs: await operations.list(request) };
    }, toStatus),
    cancel: unary(async (request, call) => {
      const actor = authorize(call.metadata, "change");
      return operations.cancel(request.runId, actor, request.reason);
    }, toStatus),
    redrive: unary(async (request, call) => {
      const actor = authorize(call.metadata, "change");
      return operations.redrive(request.runId, actor, request.reason);
    }, toStatus),
    replay: unary(async (request, call) => {
      const actor = authorize(call.metadata, "change");
      return operations.replay(request.runId, actor, request.reason);
    }, toStatus),
    deploy: unary(async (request, call) => {
      const actor = authorize(call.metadata, "change");
      const result = await operations.deploy(request, actor);
      return { agent: result.agent, changes: result.changes, previousVersion: result.previousVersion };
    }, toStatus),
    listAgents: unary(async (_request, call) => {
      authorize(call.metadata, "read");
      return { agents: operations.agents() };
    }, toStatus),
    watch: (call) => {
      const abort = new AbortController();
      call.on("cancelled", () => abort.abort());
      call.on("close", () => abort.abort());
      (async () => {
        authorize(call.metadata, "read");
        await operations.watch(
          call.request.runId,
          (event) => call.write(Envelope.fromPartial(event)),
          abort.signal,
        );
      })().then(
        () => call.end(),
        (error: unknown) => refuse(call, error, deps.log),
      );
    },
    heartbeat: unary(async (request, call) => {
      authorizeWorker(call.metadata);
      const revoked = request.leases.filter(
        (lease) => !scheduler.renewByName(request.worker, lease.runId, lease.lease),
      );
      return { revoked };
    }, toStatus),
    work: (call) => workerSession(call, deps, authorizeWorker),
  };
  return { definition: RunsService, implementation };
}

/**
 * One worker's session: its hello (what it serves), then its reports, each answered with
 * an ack once recorded. The stream closing (the worker stopped or died) releases its runs.
 */
function workerSession(
  call: grpc.ServerDuplexStream<WorkerMessage, SchedulerMessage>,
  deps: RunsGrpcDeps,
  authorize: (metadata: grpc.Metadata) => void,
): void {
  const { scheduler, log } = deps;
  try {
    authorize(call.metadata);
  } catch (error) {
    refuse(call, error, deps.log);
    return;
  }
  let link: WorkerLink | undefined;
  let closed = false;
  const send = (message: SchedulerMessage) => {
    if (!closed) call.write(message);
  };
  const close = () => {
    if (closed) return;
    closed = true;
    deps.sessions.delete(end);
    if (link !== undefined) void scheduler.left(link.id);
  };
  const end = () => {
    if (!closed) call.end();
  };
  deps.sessions.add(end);
  call.on("data", (message: WorkerMessage) => {
    const m = message.message;
    if (m === undefined) return;
    if (m.$case === "hello") {
      if (link !== undefined) return;
      const hello = m.value;
      link = {
        id: randomUUID(),
        name: hello.worker === "" ? `worker-${randomUUID().slice(0, 8)}` : hello.worker,
        serves: new Set(hello.agents.map((a) => `${a.agent}\u0000${a.version}`)),
        slots: Math.max(1, Math.min(hello.slots || 1, 1_000)),
        send,
      };
      send({
        message: {
          $case: "welcome",
          value: { worker: link.name, leaseMs: deps.leaseMs, gatewayUrl: deps.gatewayUrl ?? "" },
        },
      });
      scheduler.joined(
        link,
        hello.leases.map((l) => ({ runId: l.runId, lease: l.lease })),
      );
      log.info({ worker: link.name, agents: hello.agents, slots: link.slots }, "worker joined");
      return;
    }
    const session = link;
    if (session === undefined) return;
    switch (m.$case) {
      case "step":
        void scheduler
          .step(session.id, m.value)
          .then((result) =>
            send({ message: { $case: "ack", value: { requestId: m.value.requestId, ...result } } }),
          );
        return;
      case "done":
        void scheduler
          .done(session.id, m.value)
          .then((result) =>
            send({ message: { $case: "ack", value: { requestId: m.value.requestId, ...result } } }),
          );
        return;
      case "letGo":
        scheduler.letGoDone(session.id, m.value.runId, m.value.lease);
        return;
    }
  });
  call.on("end", () => {
    close();
    call.end();
  });
  call.on("error", close);
  call.on("close", close);
  call.on("cancelled", close);
}

function accessError(error: unknown): unknown {
  if (!(error instanceof AccessDeniedError)) return error;
  return error.reason === "unauthenticated"
    ? new UnauthenticatedError(error.message)
    : new PermissionDeniedError(error.message);
}

/**
 * Ends a stream with the error's status. grpc-js sends a stream's status from its 'error'
 * event; destroying the stream instead sends none, and the client waits until its
 * deadline (a worker's session has none) or its keepalive gives up.
 */
function refuse(
  call: grpc.ServerWritableStream<unknown, unknown> | grpc.ServerDuplexStream<unknown, unknown>,
  error: unknown,
  log: Logger,
): void {
  call.emit("error", statusError(error, log));
}

/** An error as a stream answers it (a status, not an exception). */
function statusError(
  error: unknown,
  log: Logger,
): Error & { code: GrpcStatus; details: string; metadata: Metadata } {
  const status = statusFor(log)(error);
  return Object.assign(new Error(String(status.details)), {
    code: status.code,
    details: String(status.details),
    metadata: status.metadata ?? new Metadata(),
  });
}
