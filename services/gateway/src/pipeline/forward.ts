import type { RouteChoice } from "@holdfast/proto";
import { NO_USAGE, readProviderError } from "@holdfast/providers";
import type { Dispatcher } from "undici";
import { RunStoppedGatewayError } from "../errors.js";
import { readAnswer } from "../upstream/answer.js";
import { forwardHeaders, returnHeaders, withCredential } from "../upstream/upstream.js";
import { admit, roomMade, type StartResult } from "./admit.js";
import type { PipelineDeps } from "./call.js";
import {
  clientAborted,
  type Ending,
  LEFT,
  providerRefused,
  refusalReply,
  refused,
  unreachable,
} from "./finish.js";
import type { PipelineHooks } from "./hooks.js";
import type { CallState } from "./state.js";
import type { Cancelled } from "./wait.js";

/** One attempt's fate: the provider's answer, or the error that stood for it. */
type Attempt =
  | { answered: Dispatcher.ResponseData; error?: undefined }
  | { answered?: undefined; error: unknown };

const NOBODY = Object.freeze({ kind: "none" as const });

/**
 * The forward stage: admits the call and sends it, the start's append overlapping the
 * provider's latency (nothing reaches the client before the log holds the start); again
 * after admission, when the log turns out to have held the run meanwhile (whatever the
 * provider began is dropped); then, for a started call whose attempt failed, sends it
 * again as the features say (retry, reroute). Resolves with the provider's answer to relay,
 * or with how the call ended.
 */
export async function forward(
  call: CallState,
  hooks: PipelineHooks,
  deps: PipelineDeps,
): Promise<Dispatcher.ResponseData | Ending> {
  for (;;) {
    const admitted = await admit(call, hooks, deps);
    if (!("started" in admitted)) return admitted;
    // This attempt's upstream call: aborted when the client leaves, or when the log turns
    // out not to have started the step (the run was held meanwhile).
    const attempt = new AbortController();
    if (call.left) attempt.abort();
    call.abortAttempt = () => attempt.abort();
    void admitted.started.then(
      (result) => {
        if (result !== "started") attempt.abort();
      },
      () => attempt.abort(),
    );
    let answered: Dispatcher.ResponseData | undefined;
    let upstreamError: unknown;
    try {
      answered = await send(call, hooks, attempt.signal);
    } catch (error) {
      upstreamError = error;
    } finally {
      call.abortAttempt = undefined;
    }
    // Nothing reaches the client before the log holds the call's start.
    let result: StartResult;
    try {
      result = await admitted.started;
    } catch (error) {
      answered?.body.destroy();
      throw error;
    }
    if (result === "started") {
      return retried(call, hooks, deps, answered === undefined ? { error: upstreamError } : { answered });
    }
    // The run was held, stopped or busy after all: whatever the provider began is
    // dropped, and the call goes back to admission (which parks it), or waits its turn.
    answered?.body.destroy();
    if (result === "stopped") return refused(new RunStoppedGatewayError(call.run.runId));
    if (call.left) return LEFT;
    if (result === "busy") {
      const ending = await roomMade(call, deps);
      if (ending !== undefined) return ending;
    }
  }
}

/** Sends the call to the provider once, and tells the features what its answer's headers say. */
async function send(
  call: CallState,
  hooks: PipelineHooks,
  signal: AbortSignal,
): Promise<Dispatcher.ResponseData> {
  const sentAtMs = Date.now();
  const body = call.upstreamBody;
  const headers = withCredential(forwardHeaders(call.request.headers, body.length), call.credentialHeaders);
  const answered = await call.upstream.request({
    path: call.shape.upstreamPath,
    method: "POST",
    headers,
    body,
    signal,
  });
  hooks.answered(call, { statusCode: answered.statusCode, headers: answered.headers, sentAtMs });
  return answered;
}

/** Sends the call again (after a retry's wait, or to another route target), for as long as the client stays. */
async function again(call: CallState, hooks: PipelineHooks): Promise<Attempt> {
  const retry = new AbortController();
  if (call.left) retry.abort();
  call.abortAttempt = () => retry.abort();
  try {
    return { answered: await send(call, hooks, retry.signal) };
  } catch (error) {
    return { error };
  } finally {
    call.abortAttempt = undefined;
  }
}

/**
 * A started call whose attempt failed is sent again within its step, as the features after
 * a failure say, in their order: a routed call to the next route target at once (429, 5xx,
 * unreachable); a 429 otherwise after the wait prediction names (the provider's
 * retry-after). Each is an event of the run, the input sent again its waste. When no
 * feature sends it again, the client has the failure (the give-up after retries).
 */
async function retried(
  call: CallState,
  hooks: PipelineHooks,
  deps: PipelineDeps,
  first: Attempt,
): Promise<Dispatcher.ResponseData | Ending> {
  let current = first;
  for (let attempt = 1; ; attempt++) {
    if (call.left) {
      discard(current.answered);
      return { outcome: clientAborted(NO_USAGE, call.model), reply: NOBODY };
    }
    const answered = current.answered;
    const status = answered?.statusCode ?? 0;
    if (answered !== undefined && status !== 429 && status < 500) return answered;
    const next = hooks.failed(
      call,
      answered === undefined
        ? { error: current.error }
        : { statusCode: status, headers: answered.headers, sentAtMs: Date.now() },
      attempt,
    );
    if (next?.kind === "reroute") {
      discard(answered);
      call.moveTo(next.to);
      recordRetry(call, deps, attempt + 1, status, 0, next.to.route.choice);
      current = await again(call, hooks);
      continue;
    }
    if (answered === undefined) return unreachable(current.error, call.model);
    if (next === undefined || status !== 429) return answered;
    // The refusal is read within the bound too; one past it is kept as nothing.
    const refusal = await readAnswer(answered.body, answered.headers, deps.maxAnswerBytes).catch(() => ({
      bytes: Buffer.alloc(0),
      text: "",
    }));
    recordRetry(call, deps, attempt + 1, status, next.ms);
    let how: "ready" | "timeout" | "failed" | Cancelled = await deps.waiting.pause(call, next.ms);
    if (how === "ready" && next.turn !== undefined) {
      how = (await deps.waiting.pauseUntil(call, next.turn.promise, next.turn.withinMs)).how;
    }
    if (how === "client_gone") return { outcome: clientAborted(NO_USAGE, call.model), reply: NOBODY };
    if (how !== "ready") {
      // Shutting down (or given up on, or its turn not come in time) before the retry: the
      // client has the provider's refusal.
      const error = readProviderError(429, refusal.text, call.secrets);
      return {
        outcome: providerRefused(429, error, call.model),
        reply: refusalReply(
          call,
          error,
          429,
          returnHeaders(answered.headers, refusal.bytes.length),
          refusal.bytes,
        ),
      };
    }
    current = await again(call, hooks);
  }
}

/** Records that the step's call is sent again, and what sending it again wastes. */
function recordRetry(
  call: CallState,
  deps: PipelineDeps,
  attempt: number,
  status: number,
  waitMs: number,
  route?: RouteChoice,
): void {
  deps.ledger
    .executeDurably(call.run.runId, call.labels, {
      type: "RetryStep",
      stepId: call.stepId,
      attempt,
      upstreamStatus: status,
      retryAfterMs: Math.round(waitMs),
      wastedInputTokens: call.prediction?.estimatedInputTokens ?? call.estimatedInputTokens,
      keyId: call.prediction?.keyId ?? "",
      ...(route === undefined ? {} : { route }),
    })
    .catch((error: unknown) => deps.onRecordError(error, call.run.runId));
}

/** Drops an answer the client will not get (its body read to its end, so the connection is kept). */
function discard(answered: Dispatcher.ResponseData | undefined): void {
  answered?.body.dump().catch(() => undefined);
}
