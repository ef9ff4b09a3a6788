import { type ParkCall, type RunCommand, type RunState, RunStatus, UnparkReason } from "@holdfast/events";
import type { Executed, Ledger, RunLabels } from "@holdfast/runs";
import { ParkingFullError } from "../errors.js";
import {
  type Parked,
  startKeepalive,
  type Unparked,
  untilRun,
  type Waiter,
  type WaitingOptions,
} from "../pipeline/wait.js";
import type { ParkingLot } from "./lot.js";

export interface ParkingOptions extends WaitingOptions {
  newId: () => string;
  /** This gateway process, as recorded in CallParked. */
  gateway: string;
  clock: () => number;
  onRecordError: (error: unknown, runId: string) => void;
  /** The calls parked here, within hold.max_parked_per_run and hold.max_parked. */
  lot: ParkingLot;
}

/**
 * What parking needs of a call: what any wait needs (its run, its client's side, its
 * cancellation), what it asks for (as recorded) and the body it holds while it waits. A
 * metered call (the pipeline's `Call`) is one; so is a passed-through call that names a held run.
 */
export type Parkable = Waiter & Parked;

export type { Unparked };

/**
 * Parks a call of a held run until the run is resumed (the call then goes on, unchanged),
 * stopped, or the client goes away. A parked call is a promise waiting on the run's state,
 * which the gateway keeps current from the log: a resume issued anywhere releases it here.
 * Nothing is forwarded while it waits; a streaming client gets SSE comment keepalives
 * (its status, 200, is then already sent), a non-streaming one the 1xx its client
 * tolerates, if any. The parking and its end are events of the run. A call past the
 * parking's bounds (its run's, this gateway's) is refused with ParkingFullError before
 * anything is written or recorded.
 */
export async function park(call: Parkable, labels: RunLabels, options: ParkingOptions): Promise<Unparked> {
  const { lot } = options;
  const runId = call.run.runId;
  const bytes = call.upstreamBody?.length ?? 0;
  const full = lot.take(runId, bytes);
  if (full !== undefined) throw new ParkingFullError(runId, full, lot.limitOf(full));
  let how: Unparked;
  try {
    how = await waitParked(call, labels, options);
  } finally {
    lot.leave(runId, bytes);
  }
  // Released (and recorded so) at once; it goes on when its turn comes, a few at a time.
  if (how === "released") await lot.turn();
  return how;
}

async function waitParked(call: Parkable, labels: RunLabels, options: ParkingOptions): Promise<Unparked> {
  const { ledger, clock } = options;
  const runId = call.run.runId;
  const parkId = options.newId();
  const since = clock();
  const command: ParkCall = {
    type: "ParkCall",
    parkId,
    api: call.api,
    model: call.view.model,
    stream: call.view.stream,
    gateway: options.gateway,
  };
  let parked: Executed<RunState>;
  try {
    parked = await ledger.execute(runId, labels, command);
  } catch (error) {
    // Parking unrecorded is still parking: the call waits all the same.
    options.onRecordError(error, runId);
    parked = { events: [], state: await ledger.current(runId) };
  }
  const recorded = parked.events.length > 0;

  const keepalive = startKeepalive(call, options);
  try {
    const how = await released(call, ledger, parked.state, options.shutdown);
    if (recorded) {
      ledger
        .executeDurably(runId, labels, {
          type: "UnparkCall",
          parkId,
          how: UNPARK[how],
          parkedMs: clock() - since,
        })
        .catch((error: unknown) => options.onRecordError(error, runId));
    }
    return how;
  } finally {
    keepalive();
  }
}

const UNPARK: Record<Unparked, UnparkReason> = {
  released: UnparkReason.UNPARK_REASON_RELEASED,
  stopped: UnparkReason.UNPARK_REASON_STOPPED,
  client_gone: UnparkReason.UNPARK_REASON_CLIENT_GONE,
  shutdown: UnparkReason.UNPARK_REASON_GATEWAY_LOST,
  gave_up: UnparkReason.UNPARK_REASON_GAVE_UP,
};

/**
 * Resolves when the run is no longer held (released or stopped), the client leaves, or
 * this gateway shuts down.
 */
function released(
  call: Parkable,
  ledger: Ledger<RunState, RunCommand>,
  now: RunState,
  shutdown: AbortSignal,
): Promise<Unparked> {
  return untilRun(call, ledger, shutdown, now, (state) =>
    state.status === RunStatus.Stopped ? "stopped" : state.status !== RunStatus.Held ? "released" : undefined,
  );
}
