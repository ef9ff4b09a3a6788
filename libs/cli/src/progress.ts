import { actorName, limitName } from "@holdfast/events";
import { type Actor, type AgentView, type Envelope, ReleaseReason, RunAction } from "@holdfast/proto";

// What `holdfast runs submit --wait` tells the operator while the run goes, one line an
// event, and what it says while the run waits in the queue. Pure: the command prints.

/** A line for one of the run's events, or undefined for those not worth a line (a model call's outcome). */
export function progressLine(event: Pick<Envelope, "payload">): string | undefined {
  const payload = event.payload;
  if (payload === undefined) return undefined;
  switch (payload.$case) {
    case "runSubmitted":
      return `queued: ${payload.value.agent} (version ${payload.value.version})`;
    case "runLeased": {
      const { worker, lease, reusableSteps } = payload.value;
      const reuse =
        reusableSteps > 0 ? `, reusing ${reusableSteps} recorded step${plural(reusableSteps)}` : "";
      return `leased by worker ${worker} (lease ${lease}${reuse})`;
    }
    case "stepRecorded": {
      const s = payload.value;
      const name = `${s.label}#${s.ordinal}`;
      if (s.ok)
        return `step ${name} recorded (${s.durationMs} ms${s.attempt > 1 ? `, attempt ${s.attempt}` : ""})`;
      return `step ${name} attempt ${s.attempt} failed${s.final ? "" : ", retrying"}: ${oneLine(s.error)}`;
    }
    case "stepStarted":
      return `model call ${payload.value.step} (${payload.value.model}) through the gateway`;
    case "runReleased": {
      const why: Partial<Record<ReleaseReason, string>> = {
        [ReleaseReason.RELEASE_REASON_WORKER_GONE]: "its worker went away",
        [ReleaseReason.RELEASE_REASON_LEASE_EXPIRED]: "its worker's lease expired",
        [ReleaseReason.RELEASE_REASON_HELD]: "the run was held",
      };
      const held = payload.value.reason === ReleaseReason.RELEASE_REASON_HELD;
      return `let go (${why[payload.value.reason] ?? "released"})${held ? "" : "; queued again"}`;
    }
    case "runHeld":
      return `held by ${actorLabel(payload.value.actor)}${reasonOf(payload.value.reason)}; it waits for a resume`;
    case "runTripped": {
      const trip = payload.value.trip;
      const what = trip === undefined ? "a limit" : limitName(trip.limit);
      return `${payload.value.action === RunAction.RUN_ACTION_STOP ? "stopped" : "held"} by ${what}; it waits for a resume`;
    }
    case "runStopped":
      return `stopped by ${actorLabel(payload.value.actor)}${reasonOf(payload.value.reason)}`;
    case "runResumed":
      return payload.value.checkpoint
        ? "resumed: the provider's window has room again"
        : `resumed by ${actorLabel(payload.value.actor)}${reasonOf(payload.value.reason)}`;
    case "runRedriven":
      return `${payload.value.replay ? `replaying on version ${payload.value.version}` : "re-driven"}${reasonOf(payload.value.reason)}; queued`;
    case "runFinished":
      return "finished";
    case "runFailed":
      return `failed: ${oneLine(payload.value.error)}`;
    default:
      return undefined;
  }
}

/** Where a run stands, as its events say: it waits for a worker only while `queued`. */
export interface RunStage {
  readonly submitted: boolean;
  readonly running: boolean;
  /** Held or stopped: it waits for a resume, not for a worker. */
  readonly held: boolean;
  readonly ended: boolean;
  readonly queued: boolean;
}

export const NOT_SUBMITTED: RunStage = Object.freeze({
  submitted: false,
  running: false,
  held: false,
  ended: false,
  queued: false,
});

/** The run's stage after one more of its events. */
export function stageAfter(stage: RunStage, event: Pick<Envelope, "payload">): RunStage {
  let { submitted, running, held, ended } = stage;
  switch (event.payload?.$case) {
    case "runSubmitted":
      submitted = true;
      break;
    case "runLeased":
      running = true;
      break;
    case "runReleased":
      running = false;
      break;
    case "runHeld":
    case "runTripped":
    case "runStopped":
      held = true;
      break;
    case "runResumed":
      held = false;
      break;
    case "runFinished":
    case "runFailed":
      running = false;
      ended = true;
      break;
    case "runRedriven":
      ended = false;
      break;
    default:
      return stage;
  }
  return { submitted, running, held, ended, queued: submitted && !running && !held && !ended };
}

/**
 * What a queued run waits for, from the agents' views: a worker for its agent at its
 * version, and what to do when none serves it.
 */
export function waitingLine(agent: string, version: string, agents: readonly AgentView[]): string {
  const view = agents.find((a) => a.agent === agent);
  const serving = view?.workers ?? 0;
  const onVersion = view !== undefined && view.version === version ? view.workersOnVersion : 0;
  if (onVersion > 0) {
    return `waiting for a free worker: ${onVersion} worker${plural(onVersion)} serve${onVersion === 1 ? "s" : ""} ${agent}@${version} (a full worker, or the agent's caps or its provider key's window, holds the run back)`;
  }
  if (serving > 0) {
    return `no worker serves ${agent} at version ${version} (${serving} serve${serving === 1 ? "s" : ""} another version): start one on the module of this version (holdfast worker <module>); the run waits, queued`;
  }
  return `no worker serves ${agent}: start one (holdfast worker <module>); the run waits, queued`;
}

function actorLabel(actor: Actor | undefined): string {
  if (actor === undefined) return "someone";
  const kind = actorName(actor.kind);
  return actor.name === "" ? kind : `${kind} (${actor.name})`;
}

const reasonOf = (reason: string) => (reason === "" ? "" : `: ${oneLine(reason)}`);
const oneLine = (text: string) => {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > 200 ? `${line.slice(0, 200)}…` : line;
};
const plural = (n: number) => (n === 1 ? "" : "s");
