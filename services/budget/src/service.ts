import { randomUUID } from "node:crypto";
import { listenerProblem, ServiceToken } from "@holdfast/access";
import { connectBus, type Watch } from "@holdfast/bus";
import { type Config, natsConnection } from "@holdfast/config";
import { isKnown, type StoredEnvelope } from "@holdfast/events";
import { GrpcStatus, serve, unary } from "@holdfast/grpc";
import type { Logger } from "@holdfast/log";
import {
  asOfOfRecorded,
  declaredLimits,
  declaredShapes,
  readingOfRecorded,
  type SliceRecord,
  shapesOfRecorded,
} from "@holdfast/predict";
import {
  type AcquireRequest,
  type AcquireResponse,
  BudgetService,
  FILE_DESCRIPTOR_SET_BASE64,
  type ListSharedWindowsResponse,
  RateWindowsService,
  type ReleaseRequest,
  type ReleaseResponse,
  type ReleaseSliceRequest,
  type ReleaseSliceResponse,
} from "@holdfast/proto";
import { BudgetBook, type BudgetLimit, type Lease } from "./book.js";
import { BudgetNotReadyError, budgetStatus, InvalidBudgetRequestError } from "./errors.js";
import { type ReserveStream, WindowCoordinator } from "./rate-windows/coordinator.js";

export interface RunningBudget {
  /** host:port of the gRPC API (holdfast.v1.Budget). */
  address: string;
  close(): Promise<void>;
}

const NANO_PER_USD = 1_000_000_000;

/** The budgets of a configuration, in nano-USD. */
export function budgetLimits(config: Pick<Config, "budgets">): BudgetLimit[] {
  return Object.entries(config.budgets).map(([key, budget]) => ({
    key,
    dailyNanoUsd: budget.daily_usd === undefined ? undefined : Math.round(budget.daily_usd * NANO_PER_USD),
    monthlyNanoUsd:
      budget.monthly_usd === undefined ? undefined : Math.round(budget.monthly_usd * NANO_PER_USD),
  }));
}

/**
 * Wires the budget service from configuration: it folds this month's spend from the log
 * (a direct read from the month's first event), then follows the log, and leases budget
 * slices to gateways over gRPC. Leases are kept in the KV bucket `<PREFIX>_BUDGET_LEASES`,
 * so a restarted service still counts the slices gateways hold. One instance serves a
 * deployment (the supervisor restarts it; its state is the log's and the bucket's).
 *
 * It also coordinates every provider key's rate-limit window (`holdfast.v1.RateWindows`):
 * its account of each key starts from the last reading recorded in the log and follows
 * the readings gateways record. Every slice it grants is kept in the KV bucket
 * `<PREFIX>_RATE_SLICES` before its gateway may spend it, so a restarted coordinator
 * counts what it granted before (all of it spent, until the gateway says otherwise).
 */
export async function startBudget(config: Config, log: Logger): Promise<RunningBudget> {
  const token = new ServiceToken(config.budget.token, { api: "the budget service", setting: "budget.token" });
  const unsafe = listenerProblem({
    name: "budget service",
    hostKey: "budget.host",
    exposes: "lease away every budget, and hold every run it covers",
    host: config.budget.host,
    authenticated: token.required,
    insecure: config.budget.insecure,
    setting: "budget.token (`holdfast up` makes one)",
    insecureSetting: "budget.insecure: true",
  });
  if (unsafe !== undefined) throw new Error(`The budget service will not start: ${unsafe}`);
  if (!config.nats.url) throw new Error("nats.url is not set: the budget service needs a NATS server");
  const clock = Date.now;
  const bus = await connectBus({
    ...natsConnection(config.nats),
    name: "holdfast-budget",
    principal: "budget",
    log,
  });
  await bus.provision();
  const book = new BudgetBook(budgetLimits(config));
  const leases = await bus.keyValue("BUDGET_LEASES");
  for await (const key of await leases.keys()) {
    const entry = await leases.get(key);
    if (entry !== undefined) book.restore(JSON.parse(entry.value) as Lease);
  }

  // This month's spend so far (from a day before it began: a call started then may finish in it),
  // then everything after, as it comes. With no budget configured there is no spend to
  // count (budgets are read at start): the log is neither read nor followed. An event the
  // bus cannot read is quarantined (counted, logged) and passed over: it spent nothing
  // the book can know of, and the service must start whatever the log holds.
  let ready = true;
  let watch: Watch | undefined;
  if (book.counts) {
    const now = new Date(clock());
    const monthStart = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1) - 24 * 3_600_000;
    const upTo = (await bus.streamState()).lastSeq;
    const folded = await bus.readSince(monthStart, upTo, ({ envelope }) => book.fold(envelope));
    watch = await bus.watch(
      (event) => {
        if (!BudgetBook.folds(event.type)) return;
        const envelope = bus.decode(event);
        if (envelope !== undefined) book.fold(envelope);
      },
      { afterSeq: upTo },
    );
    log.info({ folded, upTo, quarantined: bus.quarantineCounts.total }, "budgets folded from the log");
  }

  // Slices granted are kept here before gateways spend them, so a restarted coordinator
  // counts what its predecessor granted; their history outlives any slice's use.
  const slices = await bus.keyValue("RATE_SLICES");
  const coordinator = new WindowCoordinator({
    sliceMs: config.predict.slice_ms,
    agingMs: config.predict.priority_aging_s * 1_000,
    knownShape: declaredShapes(config.predict.window_shapes),
    declaredLimits: declaredLimits(config.predict.limits),
    clock,
    log,
    persist: async (record) => {
      await slices.put(record.leaseId, JSON.stringify(record));
    },
  });
  for await (const key of await slices.keys()) {
    const entry = await slices.get(key);
    if (entry !== undefined) coordinator.windows.restore(JSON.parse(entry.value) as SliceRecord, clock());
  }
  const observe = (envelope: StoredEnvelope) => {
    if (!isKnown(envelope) || envelope.payload.$case !== "rateLimitObserved") return;
    const observed = envelope.payload.value;
    if (!/^[0-9a-f]{16}$/.test(observed.keyId)) return;
    coordinator.windows.observe(
      observed.keyId,
      observed.upstream,
      readingOfRecorded(observed, envelope.timestampMs),
      {
        asOfMs: asOfOfRecorded(Number(observed.asOfMs), envelope.timestampMs, clock()),
        readAtMs: envelope.timestampMs,
        nowMs: clock(),
      },
      shapesOfRecorded(observed),
    );
  };
  for (const { envelope } of await bus.lastOnSubjects([bus.subjects.ofKeyType("RateLimitObserved")])) {
    observe(envelope);
  }
  // A reading is what the coordinator grants by: taken the moment it is stored (readings
  // are sampled, each one only near a window's end, where it matters most).
  const readings = await bus.follow(
    ["RateLimitObserved"],
    (event) => {
      const envelope = bus.decode(event);
      if (envelope !== undefined) observe(envelope);
    },
    { keys: true },
  );

  const expiry = setInterval(() => {
    const before = new Set(book.openLeases().map((l) => l.leaseId));
    book.expire(clock());
    const open = new Set(book.openLeases().map((l) => l.leaseId));
    for (const id of before) if (!open.has(id)) void leases.delete(id).catch(() => undefined);
  }, 1_000);
  expiry.unref();

  const acquire = async (request: AcquireRequest): Promise<AcquireResponse> => {
    if (!ready) throw new BudgetNotReadyError("the budget service is still reading the log");
    if (request.key === "") throw new InvalidBudgetRequestError("a lease needs a budget key (a tag, or *)");
    if (request.gateway === "")
      throw new InvalidBudgetRequestError("a lease needs the gateway asking for it");
    if (request.wantNanoUsd < 0 || request.needNanoUsd < 0) {
      throw new InvalidBudgetRequestError("want and need must not be negative");
    }
    const grant = book.grant({
      key: request.key,
      gateway: request.gateway,
      wantNanoUsd: request.wantNanoUsd,
      needNanoUsd: request.needNanoUsd,
      reportedNanoUsd: request.reportedNanoUsd,
      leaseId: randomUUID(),
      nowMs: clock(),
      leaseMs: config.budget.lease_ms,
    });
    await leases.put(grant.lease.leaseId, JSON.stringify(grant.lease));
    if (grant.exhausted !== undefined) {
      log.info({ key: request.key, gateway: request.gateway, trip: grant.exhausted }, "budget spent");
    }
    return {
      leaseId: grant.lease.leaseId,
      grantedNanoUsd: grant.lease.grantedNanoUsd,
      validForMs: config.budget.lease_ms,
      exhausted: grant.exhausted,
    };
  };
  const release = async (request: ReleaseRequest): Promise<ReleaseResponse> => {
    book.release(request.leaseId, request.reportedNanoUsd, clock());
    await leases.delete(request.leaseId).catch(() => undefined);
    return {};
  };

  const releaseSlice = async (request: ReleaseSliceRequest): Promise<ReleaseSliceResponse> => {
    coordinator.release(request);
    return {};
  };
  const listSharedWindows = async (): Promise<ListSharedWindowsResponse> => coordinator.list();

  const server = await serve({
    host: config.budget.host,
    port: config.budget.port,
    freePortIfTaken: config.free_port_if_taken,
    services: [
      {
        definition: BudgetService,
        implementation: { acquire: unary(acquire, budgetStatus), release: unary(release, budgetStatus) },
      },
      {
        definition: RateWindowsService,
        implementation: {
          reserve: (call: ReserveStream) => coordinator.reserve(call),
          releaseSlice: unary(releaseSlice, budgetStatus),
          listSharedWindows: unary(listSharedWindows, budgetStatus),
        },
      },
    ],
    health: true,
    reflection: Buffer.from(FILE_DESCRIPTOR_SET_BASE64, "base64"),
    // Gateways alone may lease budgets and windows: anyone else could drain a budget with
    // slices nobody spends, and hold every run it covers.
    authorize: (metadata) => {
      const [value] = metadata.get("authorization");
      try {
        token.check(typeof value === "string" ? value : value?.toString("utf8"));
        return undefined;
      } catch (error) {
        return { code: GrpcStatus.UNAUTHENTICATED, details: (error as Error).message };
      }
    },
  });
  log.info(
    { address: server.address, budgets: budgetLimits(config).map((b) => b.key) },
    "budget service listening",
  );
  return {
    address: server.address,
    async close() {
      ready = false;
      clearInterval(expiry);
      coordinator.close();
      await server.close();
      await watch?.stop();
      await readings.stop();
      await bus.close();
    },
  };
}
