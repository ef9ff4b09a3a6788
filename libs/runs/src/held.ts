import type { Bus, WatchedEvent } from "@holdfast/bus";
import { decodeEnvelope, isKnown, RunAction, type StoredEnvelope } from "@holdfast/events";
import type { LogSink } from "./follower.js";

/** The events that hold, stop or release a run. */
export const CONTROL_TYPES = [
  "RunTripped",
  "RunHeld",
  "RunStopped",
  "RunResumed",
  "ToolCallGated",
  "LoopDetected",
  "ToolCallApproved",
  "ToolCallDenied",
] as const;

export type HeldStatus = "held" | "stopped";

/**
 * Which runs are held or stopped, fleet-wide, kept from the log: the last control event of
 * each run decides. A gateway consults it before forwarding a call of a run it has never
 * served, so a run held through another gateway is parked here too without reading the
 * run first. Built at start from the last control event of each run (one direct read per
 * event type), then followed on the watch.
 */
export class HeldRuns implements LogSink {
  private readonly runs = new Map<string, { status: HeldStatus | undefined; seq: number }>();

  constructor(private readonly bus: Bus) {}

  async load(): Promise<void> {
    const filters = CONTROL_TYPES.map((type) => this.bus.subjects.ofType(type));
    for (const { envelope, streamSequence } of await this.bus.lastOnSubjects(filters)) {
      this.apply(envelope.runId, envelope, streamSequence);
    }
  }

  /** Held or stopped, as far as the log has said; undefined when neither. */
  statusOf(runId: string): HeldStatus | undefined {
    return this.runs.get(runId)?.status;
  }

  /** Runs held or stopped now. */
  get count(): number {
    let n = 0;
    for (const run of this.runs.values()) if (run.status !== undefined) n += 1;
    return n;
  }

  heard(event: WatchedEvent): void {
    if (!(CONTROL_TYPES as readonly string[]).includes(event.type)) return;
    try {
      this.apply(event.runId, decodeEnvelope(event.data), event.streamSequence);
    } catch {
      // An event this version cannot read holds nobody here; the run's own fold decides.
    }
  }

  gap(): void {
    void this.load().catch(() => undefined);
  }

  private apply(runId: string, envelope: StoredEnvelope, seq: number): void {
    const known = this.runs.get(runId);
    if (known !== undefined && known.seq >= seq) return;
    if (!isKnown(envelope)) return;
    // A resumed run keeps its entry (status undefined): an older event read late must not
    // hold it again.
    this.runs.set(runId, { status: statusAfter(envelope, known?.status), seq });
  }
}

function statusAfter(envelope: StoredEnvelope, before: HeldStatus | undefined): HeldStatus | undefined {
  const payload = envelope.payload;
  switch (payload?.$case) {
    case "runTripped":
      return payload.value.action === RunAction.RUN_ACTION_STOP ? "stopped" : "held";
    case "runHeld":
      return before === "stopped" ? "stopped" : "held";
    case "runStopped":
      return "stopped";
    case "runResumed":
      return undefined;
    case "toolCallGated":
    case "loopDetected":
      if (before === "stopped") return "stopped";
      return payload.value.action === RunAction.RUN_ACTION_STOP ? "stopped" : "held";
    case "toolCallApproved":
      // The run goes on once its last held answer is decided; with more than one held, its
      // own fold (read when this gateway parks a call) has the last word.
      return undefined;
    case "toolCallDenied":
      return payload.value.runStopped ? "stopped" : undefined;
    default:
      return before;
  }
}
