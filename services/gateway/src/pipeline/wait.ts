import type { IncomingHttpHeaders } from "node:http";
import type { Api, RunCommand, RunState } from "@holdfast/events";
import type { Ledger, RunLabels } from "@holdfast/runs";
import type { Cancellation } from "./hooks.js";
import { interimFor } from "./interim.js";
import type { ResponseWriter } from "./writer.js";

/**
 * What waiting needs of a call: its run, what it asks for, its client's side, and its one
 * cancellation signal. A metered call (the pipeline's `Call`) is one; so is a passed-through
 * call that names a held run.
 */
export interface Waiter {
  readonly run: { readonly runId: string };
  readonly view: { readonly model: string; readonly stream: boolean };
  readonly request: { readonly headers: IncomingHttpHeaders };
  readonly writer: ResponseWriter;
  /** Aborted, with a Cancellation as its reason, when the call is cancelled. */
  readonly signal: AbortSignal;
  cancel(reason: Cancellation): void;
}

/** How a wait was cut short: the call's cancellation. */
export type Cancelled = Cancellation["kind"];

export interface WaitingOptions {
  ledger: Ledger<RunState, RunCommand>;
  keepaliveMs: number;
  /** Send the 1xx a waiting non-streaming client tolerates (hold.keepalive_1xx). */
  keepalive1xx: boolean;
  /** Aborted when this gateway shuts down: a call waiting then is cancelled ("retry elsewhere"). */
  shutdown: AbortSignal;
}

/** How a parked call left its parking. */
export type Unparked = "released" | "stopped" | Cancelled;

/** Parks a call of a held run until the run is resumed or stopped (the holds' parking). */
export type Park = (call: Waiter & Parked, labels: RunLabels) => Promise<Unparked>;

/** What parking records of a call besides what any wait needs. */
export interface Parked {
  /** The API shape it speaks; API_UNSPECIFIED for a passed-through path. */
  readonly api: Api;
  /** The body it will send, which it holds while it waits. */
  readonly upstreamBody: Buffer | undefined;
}

/** The headers a held streaming call is answered with before the provider's are known. */
export const HELD_STREAM_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
  "x-holdfast-held": "true",
};

const SHUTDOWN: Cancellation = Object.freeze({ kind: "shutdown" });

/**
 * Waiting as the pipeline offers it to features and to itself: in place for a time or a
 * promise, on a run's state, for room in a busy run, or parked while the run is held;
 * each with the keepalives a waiting client needs, and each cut short by the call's one
 * cancellation signal. The gateway's shutdown cancels a call that waits (and only one
 * that waits: a call being answered is let finish).
 */
export class Waiting {
  constructor(
    private readonly options: WaitingOptions,
    private readonly parking: Park,
  ) {}

  /** Keeps the waiting client from timing out; returns the function that stops it. */
  keepalive(call: Pick<Waiter, "view" | "writer" | "request">): () => void {
    return startKeepalive(call, this.options);
  }

  /** Waits `ms` in place (a rate-limit wait, a 429's retry-after). */
  pause(call: Waiter, ms: number): Promise<"ready" | Cancelled> {
    return pause(call, ms, this.options);
  }

  /** Waits in place for `promise` (a turn in a shared window's queue), at most `ms`. */
  pauseUntil<T>(call: Waiter, promise: Promise<T>, ms: number): Promise<Paused<T>> {
    return pauseUntil(call, promise, ms, this.options);
  }

  /** Waits on the run's state until `judge` says what became of the call (no keepalives of its own). */
  untilRun<T>(
    call: Waiter,
    now: RunState | undefined,
    judge: (state: RunState) => T | undefined,
  ): Promise<T | Cancelled> {
    return untilRun(call, this.options.ledger, this.options.shutdown, now, judge);
  }

  /** Waits for a call of the run in flight to finish (the run is busy near its cost limit). */
  waitForRoom(call: Waiter): Promise<"ready" | Cancelled> {
    return waitForRoom(call, this.options);
  }

  /** Parks a call of a held run until it is resumed (then "released") or stopped. */
  park(call: Waiter & Parked, labels: RunLabels): Promise<Unparked> {
    return this.parking(call, labels);
  }
}

/** What a wait for a promise came to. */
export type Paused<T> =
  | { readonly how: "ready"; readonly value: T }
  | { readonly how: "failed"; readonly error: unknown }
  | { readonly how: "timeout" | Cancelled };

/**
 * Calls `then` with the call's cancellation once it is cancelled, cancelling it first when
 * the gateway shuts down; returns the function that stops listening.
 */
function whenCancelled(call: Waiter, shutdown: AbortSignal, then: (how: Cancelled) => void): () => void {
  const signal = call.signal;
  const cancelled = () => then((signal.reason as Cancellation | undefined)?.kind ?? "client_gone");
  const closing = () => call.cancel(SHUTDOWN);
  signal.addEventListener("abort", cancelled, { once: true });
  shutdown.addEventListener("abort", closing, { once: true });
  if (signal.aborted) cancelled();
  else if (shutdown.aborted) closing();
  return () => {
    signal.removeEventListener("abort", cancelled);
    shutdown.removeEventListener("abort", closing);
  };
}

/**
 * Waits on the run's state as this gateway follows it (a change appended by any process
 * reaches it through the log) until `judge` says what became of the waiting call, or the
 * call is cancelled (its client leaves, this gateway shuts down, a feature gives up on it).
 * `now` is the state to judge first, in case it moved between the decision to wait and
 * the subscription.
 */
export function untilRun<T>(
  call: Waiter,
  ledger: Ledger<RunState, RunCommand>,
  shutdown: AbortSignal,
  now: RunState | undefined,
  judge: (state: RunState) => T | undefined,
): Promise<T | Cancelled> {
  return new Promise((resolve) => {
    let done = false;
    let stop: (() => void) | undefined;
    const settle = (how: T | Cancelled) => {
      if (done) return;
      done = true;
      unsubscribe();
      stop?.();
      resolve(how);
    };
    const check = (state: RunState) => {
      const how = judge(state);
      if (how !== undefined) settle(how);
    };
    const unsubscribe = ledger.subscribe(call.run.runId, check);
    stop = whenCancelled(call, shutdown, settle);
    if (done) return stop();
    const state = ledger.cached(call.run.runId) ?? now;
    if (state !== undefined) check(state);
  });
}

/** Keeps the waiting client from timing out; returns the function that stops it. */
export function startKeepalive(
  call: Pick<Waiter, "view" | "writer" | "request">,
  options: Pick<WaitingOptions, "keepaliveMs" | "keepalive1xx">,
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
 * cost limit the run's calls start one at a time), or the call is cancelled; the waiting
 * client gets the same keepalives as a parked one.
 */
export async function waitForRoom(call: Waiter, options: WaitingOptions): Promise<"ready" | Cancelled> {
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
 * retry-after asked for), with the keepalives a parked call gets; cut short when the call
 * is cancelled.
 */
export function pause(
  call: Waiter,
  ms: number,
  options: Pick<WaitingOptions, "keepaliveMs" | "keepalive1xx" | "shutdown">,
): Promise<"ready" | Cancelled> {
  if (ms <= 0) return Promise.resolve("ready");
  const keepalive = startKeepalive(call, options);
  return new Promise<"ready" | Cancelled>((resolve) => {
    let done = false;
    let stop: (() => void) | undefined;
    const settle = (how: "ready" | Cancelled) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      stop?.();
      resolve(how);
    };
    const timer = setTimeout(() => settle("ready"), ms);
    stop = whenCancelled(call, options.shutdown, settle);
    if (done) stop();
  }).finally(keepalive);
}

/**
 * Waits in place for `promise` (a turn in a shared window's queue), without holding the
 * run, with the keepalives a parked call gets; cut short after `ms`, or when the call is
 * cancelled.
 */
export function pauseUntil<T>(
  call: Waiter,
  promise: Promise<T>,
  ms: number,
  options: Pick<WaitingOptions, "keepaliveMs" | "keepalive1xx" | "shutdown">,
): Promise<Paused<T>> {
  const keepalive = startKeepalive(call, options);
  return new Promise<Paused<T>>((resolve) => {
    let done = false;
    let stop: (() => void) | undefined;
    const settle = (outcome: Paused<T>) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      stop?.();
      resolve(outcome);
    };
    const timer = setTimeout(() => settle({ how: "timeout" }), Math.max(0, ms));
    promise.then(
      (value) => settle({ how: "ready", value }),
      (error: unknown) => settle({ how: "failed", error }),
    );
    stop = whenCancelled(call, options.shutdown, (how) => settle({ how }));
    if (done) stop();
  }).finally(keepalive);
}
