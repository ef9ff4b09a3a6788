import { hostname } from "node:os";
import type * as grpc from "@grpc/grpc-js";
import { connect, GrpcStatus } from "@holdfast/grpc";
import {
  type LeaseRef,
  type RunAssigned,
  RunsClient,
  type SchedulerMessage,
  type StepReport,
  type WorkerMessage,
} from "@holdfast/proto";
import type { Agent } from "./agent.js";
import { Heartbeat } from "./beat.js";
import { RunRevokedError, StepFailedError } from "./errors.js";
import { DEFAULT_RETRY_DELAYS_MS, Run, recordableJson } from "./run.js";

export interface WorkerOptions {
  /** The agents this worker runs (each at its version). */
  readonly agents: readonly Agent<never, unknown>[];
  /** The scheduler's gRPC address (host:port); default HOLDFAST_SCHEDULER_URL, else 127.0.0.1:4144. */
  readonly scheduler?: string;
  /** The control token (HOLDFAST_TOKEN or HOLDFAST_CONTROL__TOKEN by default), when the stack has one. */
  readonly token?: string;
  /** How the worker names itself (default host-pid). */
  readonly name?: string;
  /** Runs it takes at once (default 1). */
  readonly slots?: number;
  /** Where its runs' model calls go (default HOLDFAST_GATEWAY_URL, else what the scheduler says). */
  readonly gatewayUrl?: string;
  /**
   * Gateway keys by tenant, for a gateway with `tenants` configured: a run's model calls
   * carry its tenant's key (X-Holdfast-Key). Without its tenant's key, a tenant's run's
   * calls name only its tenant (X-Holdfast-Tenant), which such a gateway refuses.
   */
  readonly tenantKeys?: Readonly<Record<string, string>>;
  /** Waits between a step's attempts; the last repeats (default 1, 2, 4, 8 s). */
  readonly retryDelaysMs?: readonly number[];
  /** How long a run told to stop may hold the event loop before the process is ended (default 10 s). */
  readonly killBlockedAfterMs?: number;
  /** Told of what the worker does (runs taken, ended, let go; reconnects). */
  readonly onEvent?: (event: WorkerEvent) => void;
}

export type WorkerEvent =
  | { type: "connected"; worker: string }
  | { type: "disconnected"; error: string }
  | { type: "started"; runId: string; agent: string; lease: number; reusable: number }
  | { type: "finished"; runId: string; ok: boolean; reused: number; ran: number; error?: string }
  | { type: "revoked"; runId: string; reason: string };

interface Pending {
  readonly message: WorkerMessage;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

interface Active {
  readonly run: Run;
  readonly lease: number;
  readonly agent: string;
}

/** A connected worker: it runs what the scheduler hands it until stopped. */
export interface HoldfastWorker {
  readonly name: string;
  /** Runs it is running now. */
  readonly running: number;
  /** Stops taking runs, lets go of the ones it runs (they go to another worker, reusing their steps) and disconnects. */
  stop(): Promise<void>;
}

/**
 * Connects to the scheduler and serves `agents`: each run handed to it runs its agent's
 * code; each step is recorded before the code goes on; a run told to stop (held,
 * cancelled, past its ceiling) is let go. Its leases are renewed from a thread of its own,
 * so a step that holds the event loop does not lose them; a worker whose connection drops
 * reconnects and says which runs it still runs.
 */
export async function worker(options: WorkerOptions): Promise<HoldfastWorker> {
  const address = options.scheduler ?? process.env.HOLDFAST_SCHEDULER_URL ?? "127.0.0.1:4144";
  const token = options.token ?? process.env.HOLDFAST_TOKEN ?? process.env.HOLDFAST_CONTROL__TOKEN;
  const authorization = token === undefined || token === "" ? undefined : `Bearer ${token}`;
  const name = options.name ?? `${hostname()}-${process.pid}`;
  const agents = new Map(options.agents.map((a) => [`${a.name}\u0000${a.version}`, a]));
  if (agents.size === 0) throw new TypeError("a worker needs at least one agent");
  const client = connect(RunsClient, {
    address,
    ...(authorization === undefined ? {} : { metadata: { authorization } }),
    keepaliveMs: 10_000,
    // A run's assignment carries every step it recorded (each up to MAX_RESULT_BYTES): far
    // past grpc-js's 4 MiB default for a long run.
    maxReceiveBytes: -1,
  });
  const active = new Map<string, Active>();
  const pending = new Map<number, Pending>();
  let nextRequest = 1;
  let stream: grpc.ClientDuplexStream<WorkerMessage, SchedulerMessage> | undefined;
  // Where model calls go: as configured here, else as the scheduler says in each session's
  // welcome (a scheduler restarted with another stack names another gateway).
  const configuredGateway = options.gatewayUrl ?? process.env.HOLDFAST_GATEWAY_URL;
  let gatewayUrl = configuredGateway;
  let leaseMs = 30_000;
  let stopping = false;
  let heartbeat: Heartbeat | undefined;
  let connected!: () => void;
  let failedFirst!: (error: Error) => void;
  const firstConnect = new Promise<void>((resolve, reject) => {
    connected = resolve;
    failedFirst = reject;
  });
  let everConnected = false;

  const leases = (): LeaseRef[] => [...active.entries()].map(([runId, a]) => ({ runId, lease: a.lease }));
  const beat = (now = false) => heartbeat?.leases(leases(), now);

  const write = (message: WorkerMessage) => {
    try {
      stream?.write(message);
    } catch {
      // The stream broke: what waits for an ack is sent again on the next one.
    }
  };
  /** Sends a report and resolves once the scheduler recorded it (re-sent across reconnects). */
  const send = (build: (requestId: number) => WorkerMessage): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      const requestId = nextRequest++;
      const message = build(requestId);
      pending.set(requestId, { message, resolve, reject });
      write(message);
    });

  const revoke = (runId: string, lease: number, reason: string) => {
    const running = active.get(runId);
    if (running === undefined || running.lease !== lease) return;
    active.delete(runId);
    running.run.revoke(reason);
    beat(true);
    options.onEvent?.({ type: "revoked", runId, reason });
    for (const [id, p] of pending) {
      const m = p.message.message;
      const owner = m?.$case === "step" || m?.$case === "done" ? m.value.runId : undefined;
      if (owner === runId) {
        pending.delete(id);
        p.reject(new RunRevokedError(runId, reason));
      }
    }
  };

  const start = (assigned: RunAssigned) => {
    const agent = agents.get(`${assigned.agent}\u0000${assigned.version}`);
    if (agent === undefined || stopping) {
      write({ message: { $case: "letGo", value: { runId: assigned.runId, lease: assigned.lease } } });
      return;
    }
    const { runId, lease } = assigned;
    const run = new Run({
      runId,
      lease,
      tag: assigned.tag,
      tenant: assigned.tenant,
      recorded: assigned.steps,
      attempts: assigned.attempts,
      retryDelaysMs: options.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS,
      gatewayUrl,
      tenantKey:
        options.tenantKeys !== undefined && Object.hasOwn(options.tenantKeys, assigned.tenant)
          ? options.tenantKeys[assigned.tenant]
          : undefined,
      recorder: {
        record: (report) =>
          send((requestId) => ({
            message: { $case: "step", value: { requestId, runId, lease, ...report } satisfies StepReport },
          })),
      },
    });
    active.set(runId, { run, lease, agent: agent.name });
    beat();
    options.onEvent?.({ type: "started", runId, agent: agent.name, lease, reusable: assigned.steps.length });
    void (async () => {
      let ok = false;
      let output: unknown;
      let failure: unknown;
      try {
        output = await agent.run(run, parseInput(assigned.inputJson) as never);
        ok = true;
      } catch (error) {
        failure = error;
      }
      if (run.signal.aborted || active.get(runId)?.run !== run) {
        // No longer ours: say it is let go (its slot comes back).
        write({ message: { $case: "letGo", value: { runId, lease } } });
        return;
      }
      let outputJson = "";
      if (ok) {
        try {
          outputJson = recordableJson(output, "a run");
        } catch (error) {
          ok = false;
          outputJson = "";
          failure = new Error(
            `the agent returned a value that cannot be recorded: ${(error as Error).message}`,
          );
        }
      }
      const failedStep = failure instanceof StepFailedError ? failure : undefined;
      try {
        await send((requestId) => ({
          message: {
            $case: "done",
            value: {
              requestId,
              runId,
              lease,
              ok,
              outputJson,
              degraded: run.degraded,
              error: ok ? "" : messageOf(failure),
              label: failedStep?.label ?? run.failedStep?.label ?? "",
              ordinal: failedStep?.ordinal ?? run.failedStep?.ordinal ?? 0,
            },
          },
        }));
      } catch {
        // Revoked meanwhile: the run is someone else's now.
      } finally {
        if (active.get(runId)?.run === run) active.delete(runId);
        beat();
        options.onEvent?.({
          type: "finished",
          runId,
          ok,
          ...run.stats,
          ...(ok ? {} : { error: messageOf(failure) }),
        });
      }
    })();
  };

  const open = () => {
    const call = client.work({ deadline: Number.POSITIVE_INFINITY });
    stream = call;
    call.on("data", (message: SchedulerMessage) => {
      const m = message.message;
      if (m === undefined) return;
      switch (m.$case) {
        case "welcome": {
          leaseMs = Number(m.value.leaseMs) || leaseMs;
          gatewayUrl = configuredGateway ?? (m.value.gatewayUrl === "" ? undefined : m.value.gatewayUrl);
          heartbeat ??= new Heartbeat({
            address,
            authorization,
            worker: name,
            intervalMs: Math.max(100, Math.floor(leaseMs / 3)),
            graceMs: options.killBlockedAfterMs ?? 10_000,
            onRevoked: (revoked) => {
              for (const lease of revoked) revoke(lease.runId, lease.lease, "lease_over");
              beat(true);
            },
          });
          beat();
          everConnected = true;
          options.onEvent?.({ type: "connected", worker: m.value.worker });
          connected();
          // Reports that waited for a connection go out on this one.
          for (const p of pending.values()) write(p.message);
          return;
        }
        case "assigned":
          start(m.value);
          return;
        case "ack": {
          const p = pending.get(Number(m.value.requestId));
          if (p === undefined) return;
          if (m.value.ok) {
            pending.delete(Number(m.value.requestId));
            p.resolve();
            return;
          }
          const m2 = p.message.message;
          const runId = m2?.$case === "step" || m2?.$case === "done" ? m2.value.runId : "";
          if (m.value.fenced) {
            pending.delete(Number(m.value.requestId));
            const running = active.get(runId);
            if (running !== undefined) revoke(runId, running.lease, "fenced");
            p.reject(new RunRevokedError(runId, m.value.error));
            return;
          }
          if (!m.value.error.startsWith("unavailable")) {
            // Refused for good (not a lease lost, not the log away): the run fails with it.
            pending.delete(Number(m.value.requestId));
            p.reject(new Error(`the scheduler refused the report: ${m.value.error}`));
            return;
          }
          // The log could not take it yet: send it again shortly.
          setTimeout(() => {
            if (pending.get(Number(m.value.requestId)) === p) write(p.message);
          }, 250).unref();
          return;
        }
        case "revoked":
          revoke(m.value.runId, m.value.lease, m.value.reason);
          return;
      }
    });
    const lost = (error: unknown) => {
      if (stream !== call) return;
      stream = undefined;
      if (stopping) return;
      options.onEvent?.({ type: "disconnected", error: (error as Error)?.message ?? "closed" });
      if (!everConnected) {
        // Nobody holds this worker: its channel goes with it.
        client.close();
        failedFirst(firstSessionError(address, error));
        return;
      }
      setTimeout(open, 500).unref();
    };
    call.on("error", lost);
    call.on("end", () => lost(new Error("the scheduler ended the session")));
    call.write({
      message: {
        $case: "hello",
        value: {
          worker: name,
          agents: [...agents.values()].map((a) => ({ agent: a.name, version: a.version })),
          slots: Math.max(1, options.slots ?? 1),
          leases: leases(),
        },
      },
    });
  };
  open();
  await firstConnect;
  // Keeps the process alive while it serves.
  const alive = setInterval(() => undefined, 60_000);

  return {
    name,
    get running() {
      return active.size;
    },
    async stop() {
      if (stopping) return;
      stopping = true;
      clearInterval(alive);
      for (const [runId, a] of [...active]) revoke(runId, a.lease, "worker_stopping");
      stream?.end();
      stream = undefined;
      await heartbeat?.stop();
      client.close();
    },
  };
}

/**
 * Why the first session did not open: the scheduler refused the token (its gRPC status
 * and words kept, for the caller to say where the token comes from), or it could not be
 * reached.
 */
function firstSessionError(address: string, error: unknown): Error {
  const { code, details, message } = (error ?? {}) as Partial<grpc.ServiceError>;
  if (code === GrpcStatus.UNAUTHENTICATED || code === GrpcStatus.PERMISSION_DENIED) {
    return Object.assign(
      new Error(`the scheduler at ${address} refused this worker: ${details ?? message}`),
      {
        code,
        details,
      },
    );
  }
  return new Error(`cannot reach the scheduler at ${address}: ${message ?? "closed"}`);
}

function parseInput(json: string): unknown {
  if (json === "") return undefined;
  return JSON.parse(json);
}

function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message.slice(0, 4_000);
  return String(error).slice(0, 4_000);
}
