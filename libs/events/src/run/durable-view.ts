import { type DurableRun, DurableStatus, type DurableStep } from "@holdfast/proto";
import { isKnown, type StoredEnvelope } from "../envelope.js";
import { DurablePhase, type DurableState } from "./durable.js";
import { foldRun, type RunState, RunStatus } from "./state.js";

/** Where a durable run stands, as its API says it. */
export function durableStatusOf(state: RunState): DurableStatus {
  const durable = state.durable;
  if (durable === null) return DurableStatus.DURABLE_STATUS_UNSPECIFIED;
  if (durable.phase === DurablePhase.Finished) return DurableStatus.DURABLE_STATUS_FINISHED;
  if (durable.phase === DurablePhase.Failed) return DurableStatus.DURABLE_STATUS_FAILED;
  if (state.status === RunStatus.Held || state.status === RunStatus.Stopped)
    return DurableStatus.DURABLE_STATUS_HELD;
  return durable.phase === DurablePhase.Running
    ? DurableStatus.DURABLE_STATUS_RUNNING
    : DurableStatus.DURABLE_STATUS_QUEUED;
}

/** A durable run without its steps (what a list shows), from its state. */
export function summaryOf(runId: string, state: RunState, durable: DurableState): DurableRun {
  return {
    runId,
    agent: durable.agent,
    version: durable.version,
    status: durableStatusOf(state),
    inputJson: durable.inputJson,
    outputJson: durable.outputJson,
    degraded: durable.degraded,
    failure: durable.failure,
    error: durable.error,
    failedStep: durable.failedLabel,
    partitionKey: durable.partitionKey,
    tenant: state.tenant,
    tag: state.tag,
    submittedMs: durable.submittedMs,
    endedMs: durable.endedMs ?? 0,
    ranMs: durable.ranMs,
    ceilingMs: durable.caps.ceilingMs,
    leases: durable.leases,
    worker: durable.worker,
    redrives: durable.redrives,
    replays: durable.epoch,
    caps: durable.caps,
    steps: [],
    idempotencyKey: durable.idempotencyKey,
    modelCalls: state.started,
    costNanoUsd: state.totals.costNanoUsd,
    stepsRecorded: durable.stepsOk,
  };
}

/**
 * A durable run with every step it recorded (attempts, outcome, lease), from its events:
 * as its fold takes them, each next one only (one past a gap in its sequence is none of
 * its steps).
 */
export function durableRunOf(runId: string, events: readonly StoredEnvelope[]): DurableRun | undefined {
  const state = foldRun(runId, events);
  if (state.durable === null) return undefined;
  const steps = new Map<string, DurableStep>();
  let epoch = 0;
  let lastSequence = 0;
  for (const event of events) {
    if (event.sequence !== lastSequence + 1) continue;
    lastSequence = event.sequence;
    if (!isKnown(event)) continue;
    const payload = event.payload;
    if (payload.$case === "runRedriven" && payload.value.replay) {
      epoch += 1;
      for (const step of steps.values()) step.superseded = true;
      continue;
    }
    if (payload.$case !== "stepRecorded") continue;
    const e = payload.value;
    const key = `${epoch}/${e.label}#${e.ordinal}`;
    const before = steps.get(key);
    // Reordered so a re-inserted key lands after the steps recorded since (the order they last moved).
    steps.delete(key);
    steps.set(key, {
      label: e.label,
      ordinal: e.ordinal,
      attempts: (before?.attempts ?? 0) + 1,
      ok: before?.ok === true || e.ok,
      error: e.ok ? "" : e.error,
      durationMs: before?.ok === true ? before.durationMs : Number(e.durationMs),
      lease: e.lease,
      superseded: false,
    });
  }
  return { ...summaryOf(runId, state, state.durable), steps: [...steps.values()] };
}
