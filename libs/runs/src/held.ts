import type { Bus, WatchedEvent } from "@holdfast/bus";
import { isKnown, RunAction, type StoredEnvelope } from "@holdfast/events";
import type { LogSink } from "./follower.js";

/** The events that hold, stop or release a run. */
export const CONTROL_TYPES = [
  "RunTripped",
  "RunHeld",
  "RunHeldByRule",
  "RunStopped",
  "RunResumed",
  "CheckpointCleared",
  "ToolCallGated",
  "LoopDetected",
  "ToolCallApproved",
  "ToolCallDenied",
  "ToolCallAbandoned",
] as const;

export type HeldStatus = "held" | "stopped";

/** What the index knows of one run: its holds and stops, and the answers the gate holds. */
interface RunEntry {
  /** Held or stopped by a limit, an operator, a rule, or a denial that stopped it. */
  control: HeldStatus | undefined;
  /** Answers the tool-call gate holds, with what each does to the run. */
  gates: Map<string, HeldStatus>;
  /**
   * Read at start with answers held and decided: only the latest of each kind of event was
   * read, so an earlier answer may still be held.
   */
  uncertain: boolean;
  seq: number;
}

/**
 * Which runs are held or stopped, fleet-wide, kept from the log: each run's last hold,
 * stop, trip or resume, and the answers the tool-call gate holds for it. A gateway
 * consults it before forwarding a call of a run it has never served, so a run held
 * through another gateway is parked here too without reading the run first. Built at
 * start from the last event of each of those types per run (one direct read per type,
 * applied in log order), then followed on the watch. At start a run with several answers
 * held may be known by its latest only; its own fold, read when a call is parked, has the
 * last word.
 */
export class HeldRuns implements LogSink {
  private readonly runs = new Map<string, RunEntry>();

  constructor(private readonly bus: Bus) {}

  async load(): Promise<void> {
    const filters = CONTROL_TYPES.map((type) => this.bus.subjects.ofType(type));
    const found = await this.bus.lastOnSubjects(filters);
    found.sort((a, b) => a.streamSequence - b.streamSequence);
    const gated = new Set<string>();
    for (const { envelope, streamSequence } of found) {
      this.apply(envelope.runId, envelope, streamSequence);
      if (GATE_TYPES.has(envelope.type)) gated.add(envelope.runId);
    }
    for (const runId of gated) {
      const run = this.runs.get(runId);
      if (run !== undefined && run.gates.size === 0) run.uncertain = true;
    }
  }

  /**
   * The run had answers held and decided before this process started, and only the
   * latest were read: whether an earlier one is still held is for its fold to say (a call
   * of it confirms its start with the log before anything is forwarded).
   */
  uncertain(runId: string): boolean {
    return this.runs.get(runId)?.uncertain ?? false;
  }

  /** Held or stopped, as far as the log has said; undefined when neither. */
  statusOf(runId: string): HeldStatus | undefined {
    const run = this.runs.get(runId);
    return run === undefined ? undefined : statusOf(run);
  }

  /** Runs held or stopped now. */
  get count(): number {
    let n = 0;
    for (const run of this.runs.values()) if (statusOf(run) !== undefined) n += 1;
    return n;
  }

  heard(event: WatchedEvent): void {
    if (!(CONTROL_TYPES as readonly string[]).includes(event.type)) return;
    // An event the bus quarantines holds nobody here; the run's own fold decides.
    const envelope = this.bus.decode(event);
    if (envelope !== undefined) this.apply(event.runId, envelope, event.streamSequence);
  }

  private apply(runId: string, envelope: StoredEnvelope, seq: number): void {
    let run = this.runs.get(runId);
    if (run !== undefined && run.seq >= seq) return;
    if (!isKnown(envelope)) return;
    // A resumed run keeps its entry: an older event read late must not hold it again.
    run ??= { control: undefined, gates: new Map(), uncertain: false, seq };
    run.seq = seq;
    this.runs.set(runId, run);
    const payload = envelope.payload;
    switch (payload.$case) {
      case "runTripped":
        run.control = payload.value.action === RunAction.RUN_ACTION_STOP ? "stopped" : "held";
        return;
      case "runHeld":
      case "runHeldByRule":
        if (run.control !== "stopped") run.control = "held";
        return;
      case "runStopped":
        run.control = "stopped";
        return;
      case "runResumed":
      case "checkpointCleared":
        run.control = undefined;
        return;
      case "toolCallGated":
      case "loopDetected":
        // Refused as it was gated: the run was (and stays) stopped.
        if (payload.value.runStopped) {
          run.control = "stopped";
          return;
        }
        run.gates.set(
          payload.value.gateId,
          payload.value.action === RunAction.RUN_ACTION_STOP ? "stopped" : "held",
        );
        return;
      case "toolCallApproved":
      case "toolCallAbandoned":
        run.gates.delete(payload.value.gateId);
        return;
      case "toolCallDenied":
        run.gates.delete(payload.value.gateId);
        if (payload.value.runStopped) run.control = "stopped";
        return;
      default:
        return;
    }
  }
}

/** As the run's fold has it: an operator's (or a limit's) hold or stop first, then the gate's. */
function statusOf(run: RunEntry): HeldStatus | undefined {
  if (run.control !== undefined) return run.control;
  for (const action of run.gates.values()) if (action === "stopped") return "stopped";
  return run.gates.size > 0 ? "held" : undefined;
}

const GATE_TYPES: ReadonlySet<string> = new Set([
  "ToolCallGated",
  "LoopDetected",
  "ToolCallApproved",
  "ToolCallDenied",
  "ToolCallAbandoned",
]);
