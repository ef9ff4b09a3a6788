import type { DirectBatchOptions, StoredMsg } from "@nats-io/jetstream";
import { isNotFound, type Link } from "./link.js";

/** How many messages one direct read asks for. */
export const READ_BATCH = 512;

/**
 * The one loop that reads the event stream directly (no consumer), a batch at a time:
 * each message on `filter` from `start` (a stream sequence, or a time) through stream
 * sequence `through`, in order, to `take`, at most `limit` of them. Stops at the first
 * message past `through`, at `limit`, or when a batch comes back short (the stream has no
 * more). A read that finds nothing is no error. Resolves with the stream sequence to read
 * from next: one past the last message taken (`start`, or 0 from a time, when none was).
 */
export async function readBatches(
  link: Link,
  start: number | Date,
  filter: string,
  through: number,
  take: (message: StoredMsg) => void,
  limit = Number.POSITIVE_INFINITY,
): Promise<number> {
  let from = typeof start === "number" ? start : 0;
  if (from > through) return from;
  // From a time, the first read only; each next one from where the last left off.
  let startTime = typeof start === "number" ? undefined : start.toISOString();
  for (let taken = 0; taken < limit; ) {
    const want = Math.min(READ_BATCH, limit - taken);
    let received = 0;
    let past = false;
    try {
      const request: DirectBatchOptions =
        startTime === undefined
          ? { seq: from, next_by_subj: filter, batch: want }
          : { start_time: startTime, next_by_subj: filter, batch: want };
      const batch = await link.jsm.direct.getBatch(link.stream, request);
      for await (const message of batch) {
        received += 1;
        if (message.seq > through) {
          past = true;
          break;
        }
        from = message.seq + 1;
        taken += 1;
        take(message);
      }
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
    startTime = undefined;
    if (past || received < want || from > through) break;
  }
  return from;
}
