import type { IncomingHttpHeaders } from "node:http";
import {
  type Api,
  type ParkCall,
  type RunCommand,
  type RunState,
  RunStatus,
  UnparkReason,
} from "@holdfast/events";
import type { Executed, Ledger, RunLabels } from "@holdfast/runs";
import { ParkingFullError } from "../errors.js";
import type { ResponseWriter } from "../pipeline/writer.js";
import { interimFor } from "./interim.js";
import type { ParkingLot } from "./lot.js";

export interface ParkingOptions {
  ledger: Ledger<RunState, RunCommand>;
  newId: () => string;
  /** This gateway process, as recorded in CallParked. */
  gateway: string;
  keepaliveMs: number;
  /** Send the 1xx a waiting non-streaming client tolerates (hold.keepalive_1xx). */
  keepalive1xx: boolean;
  clock: () => number;
  onRecordError: (error: unknown, runId: string) => void;
  /** Aborted when this gateway shuts down: its parked calls are answered "retry elsewhere". */
  shutdown: AbortSignal;
  /** The calls parked here, within hold.max_parked_per_run and hold.max_parked. */
  lot: ParkingLot;
}

/**
 * What waiting needs of a call: its run, what it asks for (as recorded), its client's side.
 * A metered call (the pipeline's `Call`) is one; so is a passed-through call that names a
 * held run.
 */
export interface Parkable {
  readonly run: { readonly runId: string };
  /** The API shape it speaks; API_UNSPECIFIED for a passed-through path. */
  readonly api: Api;
  readonly view: { readonly model: string; readonly stream: boolean };
  /** The body it will send, which it holds while it waits. */
  readonly upstreamBody: Buffer | undefined;
  readonly request: { readonly headers: IncomingHttpHeaders };
  readonly writer: ResponseWriter;
  /** Aborted when the client goes away. */
  readonly clientGone: AbortSignal;
  /** Aborted when a feature gives up on the call while it waits. */
  readonly giveUp: AbortController;
}

/** How a parked call left its parking. */
export type Unparked = "released" | "stopped" | "client_gone" | "shutdown" | "gave_up";

/** The headers a held streaming call is answered with before the provider's are known. */
export const HELD_STREAM_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
  "x-holdfast-held": "true",
};

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

/**
 * Waits on the run's state as this gateway follows it (a change appended by any process
 * reaches it through the log) until `judge` says what became of the waiting call, the
 * client leaves, this gateway shuts down, or a feature gives up on the call (`giveUp`).
 * `now` is the state to judge first, in case it moved between the decision to wait and
 * the subscription.
 */
export function untilRun<T>(
  call: Parkable,
  ledger: Ledger<RunState, RunCommand>,
  shutdown: AbortSignal,
  now: RunState | undefined,
  judge: (state: RunState) => T | undefined,
): Promise<T | "client_gone" | "shutdown" | "gave_up"> {
  return new Promise((resolve) => {
    let done = false;
    const settle = (how: T | "client_gone" | "shutdown" | "gave_up") => {
      if (done) return;
      done = true;
      unsubscribe();
      call.clientGone.removeEventListener("abort", gone);
      shutdown.removeEventListener("abort", closing);
      call.giveUp.signal.removeEventListener("abort", givenUp);
      resolve(how);
    };
    const check = (state: RunState) => {
      const how = judge(state);
      if (how !== undefined) settle(how);
    };
    const gone = () => settle("client_gone");
    const closing = () => settle("shutdown");
    const givenUp = () => settle("gave_up");
    const unsubscribe = ledger.subscribe(call.run.runId, check);
    call.clientGone.addEventListener("abort", gone, { once: true });
    shutdown.addEventListener("abort", closing, { once: true });
    call.giveUp.signal.addEventListener("abort", givenUp, { once: true });
    if (call.clientGone.aborted) return gone();
    if (shutdown.aborted) return closing();
    if (call.giveUp.signal.aborted) return givenUp();
    const state = ledger.cached(call.run.runId) ?? now;
    if (state !== undefined) check(state);
  });
}

/** Keeps the waiting client from timing out; returns the function that stops it. */
export function startKeepalive(
  call: Pick<Parkable, "view" | "writer" | "request">,
  options: Pick<ParkingOptions, "keepaliveMs" | "keepalive1xx">,
): () => void {
  const { writer } = call;
  if (call.view.stream) {
    // The stream's status line goes out now: a held streaming call is a 200 whatever the
    // provider later says (a provider error then arrives as the stream's error event).
    writer.startStream(200, HELD_STREAM_HEADERS);
    writer.keepalive("holdfast: held");
    const timer = setInterval(() => writer.keepalive("holdfast: held"), options.keepaliveMs);
    return () => clearInterval(timer);
  }
  const interim = options.keepalive1xx ? interimFor(call.request.headers["user-agent"]) : undefined;
  if (interim === undefined) return () => {};
  const timer = setInterval(() => writer.interim(interim), options.keepaliveMs);
  return () => clearInterval(timer);
}

/**
 * Waits, without holding the run, until one of its calls in flight has finished (near its
 * cost limit the run's calls start one at a time), the client leaves, or the gateway shuts
 * down; the waiting client gets the same keepalives as a parked one.
 */
export async function waitForRoom(
  call: Parkable,
  options: Pick<ParkingOptions, "ledger" | "keepaliveMs" | "keepalive1xx" | "shutdown">,
): Promise<"ready" | "client_gone" | "shutdown" | "gave_up"> {
  const keepalive = startKeepalive(call, options);
  try {
    const before = options.ledger.cached(call.run.runId);
    return await untilRun(call, options.ledger, options.shutdown, before, (state) =>
      before === undefined || state.open.size < before.open.size || state.status !== before.status
        ? "ready"
        : undefined,
    );
  } finally {
    keepalive();
  }
}

/**
 * Waits `ms` in place, without holding the run (a rate-limit wait, or the wait a 429's
 * retry-after asked for), with the keepalives a parked call gets; cut short when the
 * client leaves, the gateway shuts down, or a feature gives up on the call.
 */
export function pause(
  call: Parkable,
  ms: number,
  options: Pick<ParkingOptions, "keepaliveMs" | "keepalive1xx" | "shutdown">,
): Promise<"ready" | "client_gone" | "shutdown" | "gave_up"> {
  if (ms <= 0) return Promise.resolve("ready");
  const keepalive = startKeepalive(call, options);
  return new Promise<"ready" | "client_gone" | "shutdown" | "gave_up">((resolve) => {
    const signals: Array<[AbortSignal, "client_gone" | "shutdown" | "gave_up"]> = [
      [call.clientGone, "client_gone"],
      [options.shutdown, "shutdown"],
      [call.giveUp.signal, "gave_up"],
    ];
    const listeners = signals.map(([signal, how]) => {
      const listener = () => settle(how);
      signal.addEventListener("abort", listener, { once: true });
      return [signal, listener] as const;
    });
    const timer = setTimeout(() => settle("ready"), ms);
    function settle(how: "ready" | "client_gone" | "shutdown" | "gave_up"): void {
      clearTimeout(timer);
      for (const [signal, listener] of listeners) signal.removeEventListener("abort", listener);
      resolve(how);
    }
    for (const [signal, how] of signals) if (signal.aborted) return settle(how);
  }).finally(keepalive);
}

/**
 * Waits in place for `promise` (a turn in a shared window's queue), without holding the
 * run, with the keepalives a parked call gets; cut short after `ms`, or when the client
 * leaves, the gateway shuts down, or a feature gives up on the call.
 */
export function pauseUntil<T>(
  call: Parkable,
  promise: Promise<T>,
  ms: number,
  options: Pick<ParkingOptions, "keepaliveMs" | "keepalive1xx" | "shutdown">,
): Promise<
  | { readonly how: "ready"; readonly value: T }
  | { readonly how: "failed"; readonly error: unknown }
  | { readonly how: "timeout" | "client_gone" | "shutdown" | "gave_up" }
> {
  type Outcome = Awaited<ReturnType<typeof pauseUntil<T>>>;
  const keepalive = startKeepalive(call, options);
  return new Promise<Outcome>((resolve) => {
    const signals: Array<[AbortSignal, "client_gone" | "shutdown" | "gave_up"]> = [
      [call.clientGone, "client_gone"],
      [options.shutdown, "shutdown"],
      [call.giveUp.signal, "gave_up"],
    ];
    let done = false;
    const listeners = signals.map(([signal, how]) => {
      const listener = () => settle({ how });
      signal.addEventListener("abort", listener, { once: true });
      return [signal, listener] as const;
    });
    const timer = setTimeout(() => settle({ how: "timeout" }), Math.max(0, ms));
    function settle(outcome: Outcome): void {
      if (done) return;
      done = true;
      clearTimeout(timer);
      for (const [signal, listener] of listeners) signal.removeEventListener("abort", listener);
      resolve(outcome);
    }
    promise.then(
      (value) => settle({ how: "ready", value }),
      (error: unknown) => settle({ how: "failed", error }),
    );
    for (const [signal, how] of signals) if (signal.aborted) return settle({ how });
  }).finally(keepalive);
}
