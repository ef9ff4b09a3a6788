import type { SnapshotWriter } from "@holdfast/snapshots";
import type { CallState } from "./state.js";

/** The snapshot stage: what a step asked and was answered, stored by content beside its events. */
export interface CallSnapshots {
  /** The step's start is on its way to the log: its request goes in the same round of writes. */
  started(call: CallState): void;
  /** The step's outcome is on its way: its answer, as received, goes with it. */
  answered(call: CallState, status: number): void;
}

/**
 * Snapshots through a writer: nothing is awaited on the call's path, and a write that
 * fails is the writer's to count; the call goes on.
 */
export function callSnapshots(writer: SnapshotWriter): CallSnapshots {
  return {
    started(call) {
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
      void writer.answer(call.run.runId, call.stepId, status, captured, secretsOf(call));
    },
  };
}

/** The client's credentials and, after a reroute, the route's: none of them is ever stored. */
function secretsOf(call: CallState): readonly string[] {
  if (call.secrets === call.clientSecrets) return call.secrets;
  return [...new Set([...call.clientSecrets, ...call.secrets])];
}
