import { BusError } from "@holdfast/bus";
import {
  type Actor,
  ActorKind,
  DurableRunError,
  type DurableState,
  type RunCommand,
  type RunState,
  RunStatus,
  type StoredEnvelope,
} from "@holdfast/events";
import type { Logger } from "@holdfast/log";
import type { KeyWindows } from "@holdfast/predict";
import type { DurableCaps, SchedulerMessage } from "@holdfast/proto";
import type { Executed, Ledger } from "@holdfast/runs";
import type { CapBook, CapKey } from "./caps.js";
import type { StepResults } from "./results.js";

// What the scheduler knows of its runs and workers, shared by its parts: the scheduler
// itself (what the log says, workers, operators, handing out), leasing (lease.ts) and
// letting go (letgo.ts).

/** A worker's session as the scheduler sees it: what it serves and how to reach it. */
export interface WorkerLink {
  /** Unique per session (a reconnect is a new session). */
  readonly id: string;
  /** As the worker named itself. */
  readonly name: string;
  readonly serves: ReadonlySet<string>;
  readonly slots: number;
  send(message: SchedulerMessage): void;
}

export interface SchedulerOptions {
  ledger: Ledger<RunState, RunCommand>;
  /** The run's events from the log, for a run whose recorded steps are not in memory. */
  readRun: (runId: string) => Promise<StoredEnvelope[]>;
  caps: CapBook;
  /** Provider keys' windows as the log reports them (RateLimitObserved). */
  windows: KeyWindows;
  clock: () => number;
  log: Logger;
  leaseMs: number;
  /** Hears a run's events as they are stored while it runs (its model calls), until the returned function is called. */
  tail: (runId: string) => () => void;
}

export interface Queued {
  readonly runId: string;
  readonly agent: string;
  version: string;
  readonly tenant: string;
  readonly tag: string;
  readonly partitionKey: string;
  readonly caps: DurableCaps;
  readonly submittedMs: number;
  /** Not leased yet in this epoch: its start counts against the start rate. */
  firstStart: boolean;
  /** Held or stopped: no worker takes it until it is resumed. */
  held: boolean;
  /** Not handed out before this (its last lease could not be recorded). */
  notBeforeMs: number;
}

export interface Running {
  readonly queued: Queued;
  readonly lease: number;
  readonly worker: WorkerLink;
  readonly leasedAtMs: number;
  /** Wall clock run under leases before this one. */
  readonly ranBeforeMs: number;
  expiresAtMs: number;
  /** Time its calls waited in the gateway for a provider's window (not counted by the ceiling). */
  waitedMs: number;
  ceiling: NodeJS.Timeout | undefined;
  untail: () => void;
  /** Its release is being recorded (a lease expiry is not acted on twice). */
  releasing: boolean;
  /** Its worker was sent the run (a run handed over with its lease still being written may not have been yet). */
  handedOver: boolean;
}

/** A run whose lease is being recorded: what to look at again once it is. */
export interface Leasing {
  /** A hold or stop was heard meanwhile. */
  recheck: boolean;
  /** The lease was refused as the run is not queued: the log says where it stands. */
  refind: boolean;
}

export interface Worker {
  readonly link: WorkerLink;
  /** Runs it holds a slot for: running, or told to let go and not yet done with. */
  readonly busy: Set<string>;
}

export const SCHEDULER: Actor = { kind: ActorKind.ACTOR_KIND_SCHEDULER, name: "scheduler" };
export const DEFAULT_CEILING_MS = 30 * 60_000;
// What a step (or a run's output) may record: its event must fit a NATS message (1 MiB by
// default) with room to spare.
export const MAX_REPORT_BYTES = 768 * 1024;

/** The scheduler's account, as its parts (lease.ts, letgo.ts) see it. */
export interface Core {
  readonly options: SchedulerOptions;
  readonly workers: Map<string, Worker>;
  readonly queued: Map<string, Queued>;
  /** Runs queued again after running (released, resumed): they go before fresh ones. */
  readonly again: Map<string, Queued>;
  readonly running: Map<string, Running>;
  /** Runs whose lease is being recorded: a hold or stop heard meanwhile is acted on once it is. */
  readonly leasing: Map<string, Leasing>;
  readonly results: StepResults;
  /** Hands out what can be handed out now (coalesced). */
  dispatch(): void;
  /** A durable run found queued: it waits for a worker. */
  enqueue(runId: string, state: RunState): void;
  /** Acts on what another process changed of a run (hold, resume, stop). */
  controlled(runId: string): Promise<void>;
  /** What the log says of a run this scheduler lost track of. */
  found(runId: string): Promise<void>;
  /** Decides and appends a command of the run. */
  execute(queued: Queued, command: RunCommand): Promise<Executed<RunState>>;
}

/** A run whose worker has not said it still runs it (this scheduler restarted). */
export const ORPHANED: WorkerLink = Object.freeze({
  id: "",
  name: "",
  serves: new Set<string>(),
  slots: 0,
  send: () => undefined,
});

export function queuedOf(runId: string, state: RunState, durable: DurableState): Queued {
  return {
    runId,
    agent: durable.agent,
    version: durable.version,
    tenant: state.tenant,
    tag: state.tag,
    partitionKey: durable.partitionKey,
    caps: durable.caps,
    submittedMs: durable.submittedMs,
    firstStart: durable.leases === 0,
    held: state.status === RunStatus.Held || state.status === RunStatus.Stopped,
    notBeforeMs: 0,
  };
}

export function capKeyOf(queued: Queued): CapKey {
  return { tenant: queued.tenant, agent: queued.agent, partitionKey: queued.partitionKey };
}

export function ceilingOf(durable: DurableState): number {
  return durable.caps.ceilingMs > 0 ? durable.caps.ceilingMs : DEFAULT_CEILING_MS;
}

export function labelsOf(state: RunState): { tag: string; tenant: string } {
  return { tag: state.tag, tenant: state.tenant };
}

export function failure(error: unknown): { ok: false; fenced: boolean; error: string } {
  if (error instanceof DurableRunError)
    return { ok: false, fenced: error.reason === "fenced", error: error.message };
  if (error instanceof BusError) return { ok: false, fenced: false, error: `unavailable: ${error.message}` };
  return { ok: false, fenced: false, error: (error as Error).message };
}
