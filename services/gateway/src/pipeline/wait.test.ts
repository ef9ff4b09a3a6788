import { describe, expect, it } from "vitest";
import { ShuttingDownError } from "../errors.js";
import type { Cancellation } from "./hooks.js";
import { pause, pauseUntil, type Waiter } from "./wait.js";
import type { ResponseWriter } from "./writer.js";

/** A waiting call with its one cancellation signal, as the pipeline's CallState keeps it. */
function waiter(): Waiter & { readonly controller: AbortController } {
  const controller = new AbortController();
  return {
    controller,
    run: { runId: "run-1" },
    view: { model: "m", stream: false },
    request: { headers: {} },
    writer: {} as ResponseWriter,
    signal: controller.signal,
    cancel(reason: Cancellation) {
      if (!controller.signal.aborted) controller.abort(reason);
    },
  };
}

const options = (shutdown: AbortSignal) => ({ keepaliveMs: 60_000, keepalive1xx: false, shutdown });
const LONG_MS = 60_000;

describe("waiting: one cancellation signal", () => {
  it("a client that leaves cuts a wait short, as client_gone", async () => {
    const call = waiter();
    const waited = pause(call, LONG_MS, options(new AbortController().signal));
    call.cancel({ kind: "client_gone" });
    expect(await waited).toBe("client_gone");
  });

  it("a feature that gives up cuts a wait short, with its error as the call's reason", async () => {
    const call = waiter();
    const error = new ShuttingDownError();
    const waited = pauseUntil(call, new Promise(() => {}), LONG_MS, options(new AbortController().signal));
    call.cancel({ kind: "gave_up", error });
    expect(await waited).toEqual({ how: "gave_up" });
    expect(call.signal.reason).toEqual({ kind: "gave_up", error });
  });

  it("the gateway's shutdown cancels a call that waits, through its own signal", async () => {
    const call = waiter();
    const shutdown = new AbortController();
    const waited = pause(call, LONG_MS, options(shutdown.signal));
    shutdown.abort();
    expect(await waited).toBe("shutdown");
    expect(call.signal.reason).toEqual({ kind: "shutdown" });
  });

  it("a call cancelled before it waits does not wait, and the first reason stands", async () => {
    const call = waiter();
    call.cancel({ kind: "client_gone" });
    const shutdown = new AbortController();
    shutdown.abort();
    expect(await pause(call, LONG_MS, options(shutdown.signal))).toBe("client_gone");
    expect(call.signal.reason).toEqual({ kind: "client_gone" });
  });

  it("a call that is not cancelled waits its time out", async () => {
    const call = waiter();
    expect(await pause(call, 5, options(new AbortController().signal))).toBe("ready");
    expect(call.signal.aborted).toBe(false);
  });
});
