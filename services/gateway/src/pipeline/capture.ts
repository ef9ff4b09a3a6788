import type { SnapshotWriter } from "@holdfast/snapshots";
import type { CallState } from "./state.js";

/** The snapshot stage: what a step asked and was answered, stored by content beside its events. */
export interface CallSnapshots {
  /** The most characters of a streamed answer kept for its snapshot (snapshots.max_bytes). */
  readonly maxChars: number;
  /** The step's start is on its way to the log: its request goes in the same round of writes. */
  started(call: CallState): void;
  /** The step's outcome is on its way: its answer, as received, goes with it. */
  answered(call: CallState, status: number): void;
}

/**
 * Snapshots through a writer: nothing is awaited on the call's path, and a write that
 * fails is the writer's to count; the call goes on.
 */
export function callSnapshots(writer: SnapshotWriter, maxBytes: number): CallSnapshots {
  return {
    maxChars: maxBytes,
    started(call) {
      // Once a call: one parked and admitted again is the same step, its request the same.
      if (call.snapshotted) return;
      call.snapshotted = true;
      const forwarded = call.body.bytes;
      const client = call.body.client;
      void writer.request(
        call.run.runId,
        call.stepId,
        call.shape.name,
        forwarded,
        client === forwarded ? undefined : client,
        secretsOf(call),
      );
    },
    answered(call, status) {
      const captured = call.captured;
      if (captured === undefined) return;
      const answer =
        "events" in captured && captured.omitted > 0
          ? { events: "", omitted: captured.omitted }
          : "events" in captured
            ? { events: captured.events }
            : captured;
      void writer.answer(call.run.runId, call.stepId, status, answer, secretsOf(call));
    },
  };
}

/** The client's credentials and, after a reroute, the route's: none of them is ever stored. */
function secretsOf(call: CallState): readonly string[] {
  if (call.secrets === call.clientSecrets) return call.secrets;
  return [...new Set([...call.clientSecrets, ...call.secrets])];
}
