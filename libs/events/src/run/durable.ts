import {
  type Actor,
  type DurableCaps,
  type ReleaseReason,
  type RunFailed,
  RunFailure,
  type RunFinished,
  type RunLeased,
  type RunRedriven,
  type RunReleased,
  type RunSubmitted,
  type StepRecorded,
} from "@holdfast/proto";
import type { EventPayload } from "../envelope.js";
import { DurableRunError } from "../errors.js";

/**
 * A durable run's part of its state: what runs it, where it stands, and enough of its
 * recorded steps to recognise one recorded twice. O(1) per event (per label, only the
 * ordinals recorded out of order are kept).
 */
export interface DurableState {
  readonly agent: string;
  readonly version: string;
  readonly inputJson: string;
  readonly partitionKey: string;
  readonly idempotencyKey: string;
  readonly caps: DurableCaps;
  readonly phase: DurablePhase;
  readonly submittedMs: number;
  /** The latest lease (0: never leased); only a write under it is taken. */
  readonly lease: number;
  /** The worker holding `lease` while running; "" otherwise. */
  readonly worker: string;
  readonly leaseMs: number;
  /** When the current lease began (while running). */
  readonly leasedAtMs: number;
  /** Wall clock spent running over every lease that ended (what the ceiling counts). */
  readonly ranMs: number;
  /** Leases taken in all (1: ran once, without a worker lost or a hold). */
  readonly leases: number;
  /** Steps recorded ok in this epoch (reused by a re-drive), attempts that failed, and retries in all. */
  readonly stepsOk: number;
  readonly failedAttempts: number;
  /** Replays so far: each begins an epoch whose steps reuse nothing of the ones before. */
  readonly epoch: number;
  readonly redrives: number;
  /** Per label, the ordinals recorded ok in this epoch: all up to `through`, and those above it. */
  readonly recorded: ReadonlyMap<string, RecordedOrdinals>;
  /** Steps that failed and have not succeeded since ("label#ordinal"), with the last attempt recorded. */
  readonly failing: ReadonlyMap<string, number>;
  readonly outputJson: string;
  readonly degraded: string;
  readonly failure: RunFailure;
  readonly error: string;
  /** The step that failed the run, when one did. */
  readonly failedLabel: string;
  readonly endedMs: number | null;
}

export interface RecordedOrdinals {
  readonly through: number;
  readonly above: readonly number[];
}

export enum DurablePhase {
  /** Waiting for a worker (never run, released, re-driven or resumed). */
  Queued = "queued",
  Running = "running",
  Finished = "finished",
  Failed = "failed",
}

/** Queue a durable run (the first event of its run). */
export interface SubmitRun {
  readonly type: "SubmitRun";
  readonly agent: string;
  readonly version: string;
  readonly inputJson: string;
  readonly partitionKey: string;
  readonly idempotencyKey: string;
  readonly caps: DurableCaps;
  readonly actor: Actor;
}

/** Hand the run to a worker: a new lease. */
export interface LeaseRun {
  readonly type: "LeaseRun";
  readonly worker: string;
  readonly leaseMs: number;
}

/** A step returned or raised under `lease`. */
export interface RecordStep {
  readonly type: "RecordStep";
  readonly lease: number;
  readonly label: string;
  readonly ordinal: number;
  readonly attempt: number;
  readonly ok: boolean;
  readonly resultJson: string;
  readonly error: string;
  readonly final: boolean;
  readonly durationMs: number;
}

/** The worker under `lease` let go of the run (it is gone, its lease expired, the run is held). */
export interface ReleaseRun {
  readonly type: "ReleaseRun";
  readonly lease: number;
  readonly reason: ReleaseReason;
  readonly ranMs: number;
}

export interface FinishRun {
  readonly type: "FinishRun";
  readonly lease: number;
  readonly outputJson: string;
  readonly degraded: string;
  readonly ranMs: number;
}

/**
 * The run failed: its code raised under `lease`, or (lease 0) the scheduler failed it
 * whoever held it: a ceiling reached, an operator's cancel.
 */
export interface FailRun {
  readonly type: "FailRun";
  readonly lease: number;
  readonly failure: RunFailure;
  readonly error: string;
  readonly ranMs: number;
  readonly actor: Actor | undefined;
  readonly label: string;
  readonly ordinal: number;
}

/** Queue a finished or failed run again: on its version (re-drive) or on another (replay). */
export interface RedriveRun {
  readonly type: "RedriveRun";
  readonly actor: Actor;
  readonly reason: string;
  readonly replay: boolean;
  /** The version a replay runs on; a re-drive keeps the run's own. */
  readonly version: string;
}

export type DurableCommand =
  | SubmitRun
  | LeaseRun
  | RecordStep
  | ReleaseRun
  | FinishRun
  | FailRun
  | RedriveRun;

export const DURABLE_COMMANDS: ReadonlySet<string> = new Set<DurableCommand["type"]>([
  "SubmitRun",
  "LeaseRun",
  "RecordStep",
  "ReleaseRun",
  "FinishRun",
  "FailRun",
  "RedriveRun",
]);

/** Events of a durable run's own (its steps' model calls are the run's other events). */
export const DURABLE_TYPES = [
  "RunSubmitted",
  "RunLeased",
  "StepRecorded",
  "RunReleased",
  "RunFinished",
  "RunFailed",
  "RunRedriven",
] as const;

/**
 * What a durable-run command makes of the run. `held` says the run is held or stopped
 * (no worker may take it then). Idempotent: a command already carried out (a step
 * recorded again, a release of a lease already over) appends nothing; a write under a
 * lease that is not the run's latest is refused (DurableRunError "fenced"), so a worker
 * that lost its lease cannot record a step the run's new worker may be running.
 */
export function decideDurable(
  command: DurableCommand,
  durable: DurableState | null,
  held: boolean,
): EventPayload[] {
  if (command.type === "SubmitRun") {
    // The run exists: a second submission with its idempotency key is the same run, as
    // long as it asks for the same thing; one that asks for something else is refused
    // rather than answered with a run of another input.
    if (durable !== null) {
      const differs = !sameJson(durable.inputJson, command.inputJson)
        ? "input"
        : durable.partitionKey !== command.partitionKey
          ? "partition key"
          : undefined;
      if (differs === undefined) return [];
      throw new DurableRunError(
        "idempotency_key_reused",
        `idempotency key ${JSON.stringify(durable.idempotencyKey)} was used before with another ${differs}`,
      );
    }
    const value: RunSubmitted = {
      agent: command.agent,
      version: command.version,
      inputJson: command.inputJson,
      partitionKey: command.partitionKey,
      idempotencyKey: command.idempotencyKey,
      caps: command.caps,
      actor: command.actor,
    };
    return [{ $case: "runSubmitted", value }];
  }
  if (durable === null)
    throw new DurableRunError("not_durable", "the run was not submitted as a durable run");
  switch (command.type) {
    case "LeaseRun": {
      if (durable.phase !== DurablePhase.Queued) {
        throw new DurableRunError("not_queued", `the run is ${durable.phase}, not queued`);
      }
      if (held) throw new DurableRunError("held", "the run is held");
      const value: RunLeased = {
        worker: command.worker,
        lease: durable.lease + 1,
        leaseMs: command.leaseMs,
        reusableSteps: durable.stepsOk,
      };
      return [{ $case: "runLeased", value }];
    }
    case "RecordStep": {
      fence(durable, command.lease);
      // A step recorded already, or an attempt of it recorded already (a retried write).
      if (isRecorded(durable, command.label, command.ordinal)) return [];
      if (
        !command.ok &&
        (durable.failing.get(`${command.label}#${command.ordinal}`) ?? 0) >= command.attempt
      ) {
        return [];
      }
      const value: StepRecorded = {
        lease: command.lease,
        label: command.label,
        ordinal: command.ordinal,
        attempt: command.attempt,
        ok: command.ok,
        resultJson: command.ok ? command.resultJson : "",
        error: command.ok ? "" : command.error,
        final: command.ok || command.final,
        durationMs: command.durationMs,
      };
      return [{ $case: "stepRecorded", value }];
    }
    case "ReleaseRun": {
      // A lease already over (released, or the run finished under it) has nothing to give back.
      if (command.lease !== durable.lease || durable.phase !== DurablePhase.Running) return [];
      const value: RunReleased = { lease: command.lease, reason: command.reason, ranMs: command.ranMs };
      return [{ $case: "runReleased", value }];
    }
    case "FinishRun": {
      if (durable.phase === DurablePhase.Finished && durable.lease === command.lease) return [];
      fence(durable, command.lease);
      const value: RunFinished = {
        lease: command.lease,
        outputJson: command.outputJson,
        degraded: command.degraded,
        ranMs: command.ranMs,
      };
      return [{ $case: "runFinished", value }];
    }
    case "FailRun": {
      if (durable.phase === DurablePhase.Finished || durable.phase === DurablePhase.Failed) {
        if (command.lease === 0 || command.lease === durable.lease) return [];
      }
      if (command.lease !== 0) fence(durable, command.lease);
      const value: RunFailed = {
        lease: durable.lease,
        failure: command.failure,
        error: command.error,
        ranMs: command.ranMs,
        actor: command.actor,
        label: command.label,
        ordinal: command.ordinal,
      };
      return [{ $case: "runFailed", value }];
    }
    case "RedriveRun": {
      if (durable.phase !== DurablePhase.Failed && durable.phase !== DurablePhase.Finished) {
        throw new DurableRunError(
          "not_ended",
          `the run is ${durable.phase}: only a finished or failed run is re-driven`,
        );
      }
      if (!command.replay && durable.phase === DurablePhase.Finished) {
        throw new DurableRunError(
          "finished",
          "the run finished: a re-drive would reuse every step; replay it to run it again",
        );
      }
      const value: RunRedriven = {
        actor: command.actor,
        reason: command.reason,
        replay: command.replay,
        version: command.replay ? command.version : durable.version,
      };
      return [{ $case: "runRedriven", value }];
    }
  }
}

/** A write under `lease` while the run runs under it; anything else is refused. */
function fence(durable: DurableState, lease: number): void {
  if (lease !== durable.lease || durable.phase !== DurablePhase.Running) {
    throw new DurableRunError(
      "fenced",
      `lease ${lease} is over (the run is ${durable.phase}${durable.lease > 0 ? ` under lease ${durable.lease}` : ""})`,
    );
  }
}

export function isRecorded(durable: DurableState, label: string, ordinal: number): boolean {
  const recorded = durable.recorded.get(label);
  if (recorded === undefined) return false;
  return ordinal <= recorded.through || recorded.above.includes(ordinal);
}

/** The durable part of a run after one of its events; null when the event is not a durable run's. */
export function evolveDurable(
  durable: DurableState | null,
  payload: EventPayload,
  atMs: number,
): DurableState | null | undefined {
  switch (payload.$case) {
    case "runSubmitted": {
      if (durable !== null) return durable;
      const e = payload.value;
      return {
        agent: e.agent,
        version: e.version,
        inputJson: e.inputJson,
        partitionKey: e.partitionKey,
        idempotencyKey: e.idempotencyKey,
        caps: e.caps ?? { ceilingMs: 0, concurrencyPerKey: 0, startsPerMinute: 0 },
        phase: DurablePhase.Queued,
        submittedMs: atMs,
        lease: 0,
        worker: "",
        leaseMs: 0,
        leasedAtMs: 0,
        ranMs: 0,
        leases: 0,
        stepsOk: 0,
        failedAttempts: 0,
        epoch: 0,
        redrives: 0,
        recorded: NOTHING_RECORDED,
        failing: NOTHING_FAILING,
        outputJson: "",
        degraded: "",
        failure: RunFailure.RUN_FAILURE_UNSPECIFIED,
        error: "",
        failedLabel: "",
        endedMs: null,
      };
    }
    case "runLeased": {
      if (durable === null) return null;
      const e = payload.value;
      return {
        ...durable,
        phase: DurablePhase.Running,
        lease: e.lease,
        worker: e.worker,
        leaseMs: Number(e.leaseMs),
        leasedAtMs: atMs,
        leases: durable.leases + 1,
      };
    }
    case "stepRecorded": {
      if (durable === null) return null;
      const e = payload.value;
      const key = `${e.label}#${e.ordinal}`;
      if (!e.ok) {
        const failing = new Map(durable.failing);
        failing.set(key, Math.max(failing.get(key) ?? 0, e.attempt));
        return { ...durable, failing, failedAttempts: durable.failedAttempts + 1 };
      }
      if (isRecorded(durable, e.label, e.ordinal)) return durable;
      const recorded = new Map(durable.recorded);
      recorded.set(e.label, withOrdinal(recorded.get(e.label), e.ordinal));
      let failing = durable.failing;
      if (failing.has(key)) {
        failing = new Map(failing);
        (failing as Map<string, number>).delete(key);
      }
      return { ...durable, recorded, failing, stepsOk: durable.stepsOk + 1 };
    }
    case "runReleased": {
      if (durable === null || payload.value.lease !== durable.lease) return durable;
      return { ...durable, phase: DurablePhase.Queued, worker: "", ranMs: Number(payload.value.ranMs) };
    }
    case "runFinished": {
      if (durable === null) return null;
      const e = payload.value;
      return {
        ...durable,
        phase: DurablePhase.Finished,
        worker: "",
        ranMs: Number(e.ranMs),
        outputJson: e.outputJson,
        degraded: e.degraded,
        failure: RunFailure.RUN_FAILURE_UNSPECIFIED,
        error: "",
        failedLabel: "",
        endedMs: atMs,
      };
    }
    case "runFailed": {
      if (durable === null) return null;
      const e = payload.value;
      return {
        ...durable,
        phase: DurablePhase.Failed,
        worker: "",
        ranMs: Number(e.ranMs),
        failure: e.failure,
        error: e.error,
        failedLabel: e.label,
        endedMs: atMs,
      };
    }
    case "runRedriven": {
      if (durable === null) return null;
      const e = payload.value;
      const replay = e.replay;
      return {
        ...durable,
        phase: DurablePhase.Queued,
        version: e.version || durable.version,
        redrives: durable.redrives + 1,
        epoch: replay ? durable.epoch + 1 : durable.epoch,
        recorded: replay ? NOTHING_RECORDED : durable.recorded,
        failing: replay ? NOTHING_FAILING : durable.failing,
        stepsOk: replay ? 0 : durable.stepsOk,
        // A run run again starts its ceiling again.
        ranMs: 0,
        outputJson: "",
        degraded: "",
        failure: RunFailure.RUN_FAILURE_UNSPECIFIED,
        error: "",
        failedLabel: "",
        endedMs: null,
      };
    }
    default:
      return undefined;
  }
}

const NOTHING_RECORDED: ReadonlyMap<string, RecordedOrdinals> = new Map();
const NOTHING_FAILING: ReadonlyMap<string, number> = new Map();

function withOrdinal(recorded: RecordedOrdinals | undefined, ordinal: number): RecordedOrdinals {
  let through = recorded?.through ?? 0;
  const above = new Set(recorded?.above ?? []);
  above.add(ordinal);
  while (above.has(through + 1)) {
    through += 1;
    above.delete(through);
  }
  return { through, above: [...above] };
}

/** The wall clock the run has spent running by `nowMs` (its current lease included). */
export function ranMsAt(durable: DurableState, nowMs: number): number {
  return durable.phase === DurablePhase.Running
    ? durable.ranMs + Math.max(0, nowMs - durable.leasedAtMs)
    : durable.ranMs;
}

/**
 * Whether two JSON texts hold the same value: spacing, key order and number spelling
 * (`1.0`, `1e0`) aside, as a client that serialises the same input again may write it.
 */
function sameJson(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return sameValue(JSON.parse(a), JSON.parse(b));
  } catch {
    return false;
  }
}

function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((item, i) => sameValue(item, b[i]));
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  const keys = Object.keys(left);
  if (keys.length !== Object.keys(right).length) return false;
  return keys.every((key) => Object.hasOwn(right, key) && sameValue(left[key], right[key]));
}
