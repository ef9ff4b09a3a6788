import type { IncomingHttpHeaders } from "node:http";
import type { Readable } from "node:stream";
import {
  apiFromName,
  EVENT_BOUNDS,
  FailureReason,
  RunBusyError,
  type RunCommand,
  RunHeldError,
  type RunState,
  RunStatus,
  RunStoppedError,
  type StartStep,
} from "@holdfast/events";
import { toolCallsSignature } from "@holdfast/gate";
import { JsonTooDeepError, jsonDepthExceeds } from "@holdfast/http";
import type { RouteChoice } from "@holdfast/proto";
import {
  type AnswerSummary,
  AnswerTooLargeError,
  type ApiShape,
  type ErrorFields,
  NO_USAGE,
  type Pricer,
  type ProviderError,
  type RequestView,
  readProviderError,
  redactSecretsDeep,
  type SseEvent,
  SseParser,
  type StreamMeter,
  type UsageReport,
} from "@holdfast/providers";
import type { Executed, Ledger, RunLabels } from "@holdfast/runs";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { Dispatcher } from "undici";
import {
  FieldTooLongError,
  GatewayError,
  InternalGatewayError,
  InvalidRequestError,
  LogUnavailableError,
  RunStoppedGatewayError,
  ShuttingDownError,
  UpstreamAnswerTooLargeError,
  UpstreamTimeoutError,
  UpstreamUnreachableError,
} from "../errors.js";
import type { Admission } from "../hold/admission.js";
import { RequestHeaders } from "../http/headers.js";
import type { ResolveRun } from "../identify/resolve.js";
import type { ResponseIndex } from "../identify/responses.js";
import { type Answered, meterOutcome } from "../metering/meter.js";
import { renamedBody, renamedEvent } from "../routing/rename.js";
import { decodedStream, readAnswer } from "../upstream/answer.js";
import {
  forwardHeaders,
  isTimeout,
  returnHeaders,
  type Upstreams,
  withCredential,
} from "../upstream/upstream.js";
import type { Answer, Call, PipelineHooks } from "./hooks.js";
import { recordOutcome } from "./outcome.js";
import { ResponseWriter } from "./writer.js";

export interface PipelineDeps {
  ledger: Ledger<RunState, RunCommand>;
  upstreams: Upstreams;
  pricer: Pricer;
  /** This gateway process, as recorded in StepStarted ("<instance id>#<boot id>"). */
  instanceId: string;
  newId: () => string;
  resolveRun: ResolveRun;
  responses: ResponseIndex;
  /** Holds, limits and standing rules: what a call must wait for before it may start. */
  admission: Admission;
  /** False while the event log is unreachable: a call that cannot be recorded is not forwarded. */
  logConnected: () => boolean;
  onRecordError: (error: unknown, runId: string) => void;
  /** How deep a request body may nest (http.max_json_depth): deeper is refused before anything walks it. */
  maxJsonDepth: number;
  /** The most of a provider's answer read, decompressed (gateway.max_answer_bytes). */
  maxAnswerBytes: number;
  /** The most one event of a provider's stream may take while incomplete (gateway.max_event_bytes). */
  maxEventBytes: number;
}

/**
 * How a call ended, before it is made an event: how much of its answer there was (for
 * metering), and output tokens estimated from what was relayed or received of it.
 */
type Ending =
  | { kind: "completed"; status: number; answer: Answer; seenOutputTokens: number }
  | {
      kind: "failed";
      reason: FailureReason;
      status: number;
      error: ProviderError;
      usage: UsageReport;
      model: string | undefined;
      responseId: string | undefined;
      answered: Answered;
      seenOutputTokens: number;
    };
type Failed = Extract<Ending, { kind: "failed" }>;

/**
 * One model call, whatever its API shape: identify the run → decide before forward (a
 * held run's call is parked here, for as long as it takes) → record the start while
 * forwarding (the answer's first byte waits for the start's ack, which overlaps the
 * provider's own latency) → meter the answer as it streams → decide before deliver →
 * record the outcome without making the client wait for it.
 *
 * A call killed between its answer and its outcome's ack is charged by the reaper from
 * what the start recorded, marked as estimated: an answered call is never unmetered.
 */
export async function handleCall(
  shape: ApiShape,
  hooks: PipelineHooks,
  deps: PipelineDeps,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<void> {
  const t0 = performance.now();
  // The client going away aborts everything done on its behalf: the upstream attempt in
  // flight directly, and whoever listens on `call.clientGone` (a signal made only when asked
  // for: most calls end without anybody needing one).
  let left = false;
  let gone: AbortController | undefined;
  let abortAttempt: (() => void) | undefined;
  reply.raw.on("close", () => {
    if (reply.raw.writableFinished) return;
    left = true;
    abortAttempt?.();
    gone?.abort();
  });
  const raw = request.body as Buffer;
  const body = parseJson(raw, deps.maxJsonDepth);
  const read = shape.readRequest(body);
  if (!read.ok) throw new InvalidRequestError(read.error.message, { param: read.error.param });
  const view = read.request;
  // The model's name goes into the call's events: one longer than they record is refused
  // here, before the call is identified, recorded or forwarded.
  if (view.model.length > EVENT_BOUNDS.modelChars) {
    throw new FieldTooLongError("model", view.model.length, EVENT_BOUNDS.modelChars);
  }
  const run = await deps.resolveRun(
    new RequestHeaders(request.raw.rawHeaders),
    body,
    view,
    request.keyTenant,
  );
  // The credentials of this call, kept out of everything recorded about it.
  const secrets = credentialsOf(request.headers);
  const upstream = deps.upstreams.forShape(shape);
  const estimatedInputTokens = Math.ceil(raw.length / CHARS_PER_TOKEN);
  const reservation = deps.admission.reserve(
    run.runId,
    run.tag,
    view,
    view.model,
    upstream,
    estimatedInputTokens,
  );
  const call: Call = {
    shape,
    api: apiFromName(shape.name),
    view,
    run,
    stepId: deps.newId(),
    request,
    writer: new ResponseWriter(reply.raw),
    get clientGone(): AbortSignal {
      if (gone === undefined) {
        gone = new AbortController();
        if (left) gone.abort();
      }
      return gone.signal;
    },
    estimatedInputTokens,
    reservedNanoUsd: reservation.nanoUsd,
    reservedFor: view.model,
    unpriced: reservation.unpriced,
    budgetLeases: [],
    secrets,
    upstream,
    upstreamOrigin: upstream.origin,
    upstreamBody: upstreamBodyOf(shape, body, view, raw),
    model: view.model,
    credentialHeaders: undefined,
    route: undefined,
    step: 0,
    prediction: undefined,
    giveUp: new AbortController(),
  };
  const labels: RunLabels = { tag: run.tag, tenant: run.tenant };
  // From here the gateway writes the answer itself (a held call gets keepalives before
  // anything else), so every error is answered here too, in the call's API's shape.
  reply.hijack();
  try {
    await serve();
  } catch (error) {
    answerError(call, toGatewayError(error, call));
  } finally {
    hooks.ended(call);
  }

  async function serve(): Promise<void> {
    let firstByteMs = 0;
    const markFirstByte = () => {
      if (firstByteMs === 0) firstByteMs = Math.max(1, Math.round(performance.now() - t0));
    };
    const record = (ending: Ending): void => {
      const latencyMs = Math.round(performance.now() - t0);
      const command = redactSecretsDeep(
        outcomeCommand(call, ending, latencyMs, firstByteMs, deps),
        call.secrets,
      );
      hooks.outcome(call, command.outcome.cost, {
        usage: command.outcome.usage,
        latencyMs,
        status: command.outcome.upstreamStatus,
      });
      recordOutcome(deps.ledger, run.runId, labels, command, (error) => deps.onRecordError(error, run.runId));
    };
    // A follow-up naming this response (previous_response_id) may reach any gateway as soon
    // as the client has the answer: publish which run it belongs to the moment the provider
    // names it, before the answer is delivered, without waiting for the write.
    let named = false;
    const nameResponse = (summary: Pick<AnswerSummary, "responseId">): void => {
      if (named || summary.responseId === undefined || !shape.continues) return;
      named = true;
      deps.responses
        .remember(summary.responseId, run.runId)
        .catch((error: unknown) => deps.onRecordError(error, run.runId));
    };

    const response = await forward();
    if (response === undefined) return;
    const contentType = String(response.headers["content-type"] ?? "");
    if (response.statusCode < 300 && contentType.startsWith("text/event-stream")) {
      await relayStream(call, hooks, response, shape.streamMeter(view), {
        markFirstByte,
        record,
        nameResponse,
        shared: deps.ledger.shared(run.runId),
        ledger: deps.ledger,
        maxAnswerBytes: deps.maxAnswerBytes,
        maxEventBytes: deps.maxEventBytes,
      });
      return;
    }

    let bytes: Buffer;
    let text: string;
    try {
      ({ bytes, text } = await readAnswer(response.body, response.headers, deps.maxAnswerBytes));
      markFirstByte();
    } catch (error) {
      if (left) return void record(clientAborted(NO_USAGE, call.model));
      if (error instanceof AnswerTooLargeError) {
        // Cut off unread: a 2xx is charged from the estimate (the provider did the work),
        // an error status as the refusal it was.
        const status = response.statusCode;
        const answered = status < 300 ? "unreadable" : "refused";
        record(tooLarge(error, NO_USAGE, call.model, status, answered, seenTokens(error.textBytes)));
        return answerError(call, answerTooLarge(error));
      }
      const message = `The provider's connection broke before the response was complete: ${(error as Error).message}`;
      // The provider wrote its whole answer before sending it: what it did is billed.
      record(upstreamReset(message, NO_USAGE, call.model, response.statusCode, "unreadable", 0));
      return answerError(call, new UpstreamUnreachableError(message, { cause: error }));
    }

    if (response.statusCode >= 300) {
      const error = readProviderError(response.statusCode, text, call.secrets);
      record({
        kind: "failed",
        reason: FailureReason.FAILURE_REASON_UPSTREAM_STATUS,
        status: response.statusCode,
        error,
        usage: NO_USAGE,
        model: call.model,
        responseId: undefined,
        answered: "refused",
        seenOutputTokens: 0,
      });
      // A held streaming call already answered 200: the provider's error goes as the
      // stream's error event, which the client's SDK raises.
      if (call.writer.headersSent) {
        endStreamWithError(call, error.message, { type: error.type, code: error.code });
        return;
      }
      call.writer.send(response.statusCode, returnHeaders(response.headers, bytes.length), bytes);
      return;
    }
    const json = safeJson(text);
    const seenOutputTokens = seenTokens(bytes.length);
    if (typeof json !== "object" || json === null || Array.isArray(json)) {
      // Not its API's answer: the client gets it as sent, and the step is charged from the
      // estimate (the provider did the work), never recorded as a clean answer.
      record(invalidAnswer(response.statusCode, call.model, seenOutputTokens));
      call.writer.send(response.statusCode, returnHeaders(response.headers, bytes.length), bytes);
      return;
    }
    const summary = shape.summarize(json);
    nameResponse(summary);
    const answer = answerOf(summary);
    record({ kind: "completed", status: response.statusCode, answer, seenOutputTokens });
    const delivery = await hooks.deliver(call, answer);
    if (delivery.kind === "refuse") return answerError(call, delivery.error);
    if (deps.ledger.shared(run.runId)) await outcomeOnItsWay(deps.ledger);
    // A routed alias's answer names the alias, not the model that served it (unless expose_model).
    const answerModel = call.route?.answerModel;
    if (answerModel === undefined) {
      call.writer.send(response.statusCode, returnHeaders(response.headers, bytes.length), bytes);
      return;
    }
    // Renamed from the decoded text: sent decoded.
    const delivered = renamedBody(Buffer.from(text), answerModel);
    const { "content-encoding": _encoding, ...plain } = response.headers;
    call.writer.send(response.statusCode, returnHeaders(plain, delivered.length), delivered);

    /**
     * Admits the call (parking it while the run is held) and forwards it, the start's
     * append overlapping the provider's latency; again after a park, when the log turns out
     * to have held the run meanwhile. Undefined when the call is already answered.
     */
    async function forward(): Promise<Dispatcher.ResponseData | undefined> {
      for (;;) {
        const admitted = await admit(call, hooks, deps, labels);
        if (admitted === undefined) return undefined;
        // This attempt's upstream call: aborted when the client leaves, or when the log
        // turns out not to have started the step (the run was held meanwhile).
        const attempt = new AbortController();
        if (left) attempt.abort();
        abortAttempt = () => attempt.abort();
        void admitted.started.then(
          (result) => {
            if (result !== "started") attempt.abort();
          },
          () => attempt.abort(),
        );
        let answered: Dispatcher.ResponseData | undefined;
        let upstreamError: unknown;
        try {
          answered = await send(attempt.signal);
        } catch (error) {
          upstreamError = error;
        } finally {
          abortAttempt = undefined;
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
          return retried(answered === undefined ? { error: upstreamError } : { answered });
        }
        // The run was held, stopped or busy after all: whatever the provider began is
        // dropped, and the call goes back to admission (which parks it), or waits its turn.
        answered?.body.destroy();
        if (result === "stopped") return refuseStopped(call);
        if (left) return undefined;
        if (result === "busy" && !(await roomMade(call, deps))) return undefined;
      }
    }

    /** Sends the call to the provider once, and tells the hooks what its answer's headers say. */
    async function send(signal: AbortSignal): Promise<Dispatcher.ResponseData> {
      const sentAtMs = Date.now();
      const body = call.upstreamBody;
      const headers = withCredential(forwardHeaders(request.headers, body.length), call.credentialHeaders);
      const answered = await call.upstream.request({
        path: shape.upstreamPath,
        method: "POST",
        headers,
        body,
        signal,
      });
      hooks.answered(call, { statusCode: answered.statusCode, headers: answered.headers, sentAtMs });
      return answered;
    }

    /** Sends the call again (after a retry's wait, or to another route target), for as long as the client stays. */
    async function again(): Promise<Attempt> {
      const retry = new AbortController();
      if (left) retry.abort();
      abortAttempt = () => retry.abort();
      try {
        return { answered: await send(retry.signal) };
      } catch (error) {
        return { error };
      } finally {
        abortAttempt = undefined;
      }
    }

    /** Records that the step's call is sent again, and what sending it again wastes. */
    function recordRetry(attempt: number, status: number, waitMs: number, route?: RouteChoice): void {
      deps.ledger
        .executeDurably(run.runId, labels, {
          type: "RetryStep",
          stepId: call.stepId,
          attempt,
          upstreamStatus: status,
          retryAfterMs: Math.round(waitMs),
          wastedInputTokens: call.prediction?.estimatedInputTokens ?? call.estimatedInputTokens,
          keyId: call.prediction?.keyId ?? "",
          ...(route === undefined ? {} : { route }),
        })
        .catch((error: unknown) => deps.onRecordError(error, run.runId));
    }

    /**
     * A started call whose attempt failed is sent again within its step: a routed call to
     * the next route target at once (429, 5xx, unreachable); a 429 otherwise as the retry
     * policy says (after the provider's retry-after). Each is an event of the run, the input
     * sent again its waste. Undefined when the call is answered meanwhile.
     */
    async function retried(first: Attempt): Promise<Dispatcher.ResponseData | undefined> {
      let current = first;
      for (let attempt = 1; ; attempt++) {
        if (left) {
          discard(current.answered);
          return void record(clientAborted(NO_USAGE, call.model));
        }
        const answered = current.answered;
        const status = answered?.statusCode ?? 0;
        if (answered !== undefined && status !== 429 && status < 500) return answered;
        const moved =
          hooks.reroute?.(call, answered === undefined ? { error: current.error } : { statusCode: status }) ??
          undefined;
        if (moved !== undefined) {
          discard(answered);
          recordRetry(attempt + 1, status, 0, moved);
          current = await again();
          continue;
        }
        if (answered === undefined) return void failUnreachable(call, current.error, record);
        if (status !== 429 || hooks.retry === undefined) return answered;
        const waitMs = hooks.retry(
          call,
          { statusCode: status, headers: answered.headers, sentAtMs: Date.now() },
          attempt,
        );
        if (waitMs === undefined) return answered;
        // The refusal is read within the bound too; one past it is kept as nothing.
        const refusal = await readAnswer(answered.body, answered.headers, deps.maxAnswerBytes).catch(() => ({
          bytes: Buffer.alloc(0),
          text: "",
        }));
        recordRetry(attempt + 1, status, waitMs);
        const how = await deps.admission.pause(call, waitMs);
        if (how === "client_gone") return void record(clientAborted(NO_USAGE, call.model));
        if (how !== "ready") {
          // Shutting down (or given up on) before the retry: the client has the provider's refusal.
          const error = readProviderError(429, refusal.text, call.secrets);
          record({
            kind: "failed",
            reason: FailureReason.FAILURE_REASON_UPSTREAM_STATUS,
            status: 429,
            error,
            usage: NO_USAGE,
            model: call.model,
            responseId: undefined,
            answered: "refused",
            seenOutputTokens: 0,
          });
          if (call.writer.headersSent) {
            endStreamWithError(call, error.message, { type: error.type, code: error.code });
          } else {
            call.writer.send(429, returnHeaders(answered.headers, refusal.bytes.length), refusal.bytes);
          }
          return undefined;
        }
        current = await again();
      }
    }
  }
}

/** Drops an answer the client will not get (its body read to its end, so the connection is kept). */
function discard(answered: Dispatcher.ResponseData | undefined): void {
  answered?.body.dump().catch(() => undefined);
}

/** One attempt's fate: the provider's answer, or the error that stood for it. */
type Attempt =
  | { answered: Dispatcher.ResponseData; error?: undefined }
  | { answered?: undefined; error: unknown };

/** Any error as one the gateway answers: its own as they are, anything else as a 500 (logged). */
function toGatewayError(error: unknown, call: Call): GatewayError {
  if (error instanceof GatewayError) return error;
  call.request.log.error({ err: error, runId: call.run.runId }, "unexpected gateway error");
  return new InternalGatewayError("Holdfast failed while handling this call.", { cause: error });
}

/**
 * What became of a step's start: the log started it, found the run held or stopped, or
 * found it busy (near its cost limit, calls in flight must finish first).
 */
type StartResult = "started" | "held" | "stopped" | "busy";

/**
 * Lets a call in: decides before forward, parks it while the run is held (any number of
 * times: a resumed run may be held again before this call starts), refuses it while the
 * run is stopped, and appends its start. Resolves with the start in flight (or already
 * accepted, when a hook asked to confirm first), or undefined when the client left while
 * parked (recorded; nothing forwarded, nothing charged).
 */
async function admit(
  call: Call,
  hooks: PipelineHooks,
  deps: PipelineDeps,
  labels: RunLabels,
): Promise<{ started: Promise<StartResult> } | undefined> {
  for (;;) {
    const verdict = await hooks.forward(call);
    if (verdict.kind === "refuse") throw verdict.error;
    if (verdict.kind === "trip") {
      await deps.ledger.execute(call.run.runId, labels, {
        type: "TripRun",
        trip: verdict.trip,
        action: verdict.action ?? deps.admission.onTrip,
      });
    }
    const gate = await deps.admission.gate(call).catch((error: unknown) => {
      throw logUnavailable(error);
    });
    if (gate === "held") {
      const how = await deps.admission.park(call, labels);
      if (how === "client_gone") return undefined;
      if (how === "stopped") return refuseStopped(call);
      if (how === "gave_up") return gaveUp(call);
      if (how === "shutdown") {
        // The client's SDK retries a 503: on another gateway, where the call parks again.
        answerError(call, new ShuttingDownError());
        return undefined;
      }
      continue;
    }
    if (!deps.logConnected()) throw logUnavailable();
    const command = startCommand(call, deps, labels);
    const started = startResult(call, deps.ledger.execute(call.run.runId, labels, command));
    // A near limit, a matching standing rule, or a hook's say: no forwarding on a guess.
    if (gate === "confirm" || verdict.kind === "confirm") {
      const result = await started;
      if (result === "stopped") return refuseStopped(call);
      if (result === "held") continue;
      if (result === "busy") {
        if (!(await roomMade(call, deps))) return undefined;
        continue;
      }
    }
    return { started };
  }
}

// About four characters a token: what a call's input is estimated at before its usage is known.
const CHARS_PER_TOKEN = 4;

/** The start's fate; the log's own failure stays a rejection (the call cannot be recorded). */
function startResult(call: Call, execution: Promise<Executed<RunState>>): Promise<StartResult> {
  return execution.then(
    ({ events, state }) => {
      for (const event of events) {
        if (event.payload.$case !== "stepStarted") continue;
        call.step = event.payload.value.step;
        return "started";
      }
      if (state.status === RunStatus.Stopped) return "stopped";
      if (state.status === RunStatus.Held) return "held";
      // The step was already started (a retried decision): it stands.
      call.step = state.open.get(call.stepId)?.step ?? call.step;
      return "started";
    },
    (error: unknown) => {
      if (error instanceof RunHeldError) return "held";
      if (error instanceof RunStoppedError) return "stopped";
      if (error instanceof RunBusyError) return "busy";
      throw logUnavailable(error);
    },
  );
}

/**
 * Waits for the run to make room (a call in flight finished); false when the call is
 * answered meanwhile (the client left, or the gateway is shutting down).
 */
async function roomMade(call: Call, deps: PipelineDeps): Promise<boolean> {
  const how = await deps.admission.waitForRoom(call);
  if (how === "ready") return true;
  if (how === "shutdown") answerError(call, new ShuttingDownError());
  if (how === "gave_up") gaveUp(call);
  return false;
}

/** Answers a call a feature gave up on while it waited with the error the feature gave. */
function gaveUp(call: Call): undefined {
  const reason: unknown = call.giveUp.signal.reason;
  answerError(call, reason instanceof GatewayError ? reason : new ShuttingDownError());
  return undefined;
}

/** Answers a call of a stopped run with a 409 in its API's shape (or, mid-stream, the stream's error event). */
function refuseStopped(call: Call): undefined {
  answerError(call, new RunStoppedGatewayError(call.run.runId));
  return undefined;
}

/** An error the gateway answers itself, however far the answer got (a held stream is already 200). */
function answerError(call: Call, error: GatewayError): void {
  if (error.status >= 500) call.request.log.warn({ err: error }, "call not completed");
  const fields = { type: error.type, code: error.code, param: error.param };
  if (call.writer.headersSent) {
    endStreamWithError(call, error.message, fields);
    return;
  }
  call.writer.send(
    error.status,
    { "content-type": "application/json; charset=utf-8", ...error.headers },
    JSON.stringify(call.shape.errorBody(error.message, fields)),
  );
}

/**
 * Ends a stream whose 200 is out with the gateway's own error, as the call's API shape
 * ends a failed stream, after the provider's events the client already has.
 */
function endStreamWithError(call: Call, message: string, fields: ErrorFields): void {
  call.writer.end(call.shape.streamErrorEvent(message, fields, call.writer.streamed));
}

function failUnreachable(call: Call, error: unknown, record: (ending: Ending) => void): void {
  const timedOut = isTimeout(error);
  const message = timedOut
    ? "The provider did not answer in time."
    : `The provider could not be reached: ${(error as Error).message}`;
  record({
    kind: "failed",
    reason: FailureReason.FAILURE_REASON_UPSTREAM_UNREACHABLE,
    status: 0,
    error: {
      type: timedOut ? "timeout" : "unreachable",
      code: (error as { code?: string }).code ?? null,
      message,
    },
    usage: NO_USAGE,
    model: call.model,
    responseId: undefined,
    answered: "none",
    seenOutputTokens: 0,
  });
  answerError(
    call,
    timedOut
      ? new UpstreamTimeoutError(message, { cause: error })
      : new UpstreamUnreachableError(message, { cause: error }),
  );
}

/**
 * Puts an outcome just recorded on the log's socket before the client has the end of its
 * answer (its append is issued in microtasks, which this waits out, and then sent at once
 * rather than at the end of the round; the ack is not waited for). On a run another gateway
 * also serves, a client that goes straight there with the run's next call then usually
 * finds the outcome already folded in, instead of racing it.
 */
async function outcomeOnItsWay(ledger: Pick<Ledger<RunState, RunCommand>, "sendAppends">): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
  ledger.sendAppends();
}

/**
 * Passes an SSE answer through event by event as each arrives, byte for byte, except
 * events the shape marks hidden. Backpressure from a slow client slows the read from the
 * provider. The terminal event (and anything after it) is held until the decision before
 * delivery; the outcome is recorded then, without waiting for the log.
 */
async function relayStream(
  call: Call,
  hooks: PipelineHooks,
  response: Dispatcher.ResponseData,
  meter: StreamMeter,
  on: {
    markFirstByte: () => void;
    record: (ending: Ending) => void;
    nameResponse: (summary: AnswerSummary) => void;
    /** Another gateway also serves this run (see outcomeOnItsWay). */
    shared: boolean;
    ledger: Pick<Ledger<RunState, RunCommand>, "sendAppends">;
    /** The most of the stream read, all its events together (gateway.max_answer_bytes). */
    maxAnswerBytes: number;
    /** The most one event may take while incomplete (gateway.max_event_bytes). */
    maxEventBytes: number;
  },
): Promise<void> {
  const { writer, clientGone, shape } = call;
  const { markFirstByte, record } = on;
  const secrets = call.secrets;
  // A routed alias's stream names the alias, not the model that served it (unless expose_model).
  const answerModel = call.route?.answerModel;
  let unnamed = shape.continues;
  // A compressed stream is read (and relayed) as it decompresses.
  const { stream: body, decoded } = decodedStream(response.body, response.headers["content-encoding"]);
  const { "content-encoding": _encoding, ...plain } = response.headers;
  writer.startStream(response.statusCode, returnHeaders(decoded ? plain : response.headers, undefined));
  const parser = new SseParser({ maxEventBytes: on.maxEventBytes });
  let received = 0;
  let terminal = false;
  let held = "";
  // What the answer had produced as far as it was relayed, should it be cut off: about a
  // token an event, as providers stream them.
  let relayed = 0;
  const relay = (events: ReturnType<SseParser["push"]>): boolean => {
    let out = "";
    let count = 0;
    let last: SseEvent | undefined;
    for (const event of events) {
      const seen = meter.observe(event);
      if (seen.hidden) continue;
      if (event.data !== undefined) relayed += 1;
      if (seen.terminal) terminal = true;
      const raw = answerModel === undefined ? event.raw : renamedEvent(event.raw, answerModel);
      if (terminal) held += raw;
      else {
        out += raw;
        if (event.data !== undefined) {
          count += 1;
          last = event;
        }
      }
    }
    return out.length === 0 || writer.writeEvents(out, count, last);
  };
  try {
    await readChunks(body, clientGone, (chunk) => {
      received += chunk.length;
      if (received > on.maxAnswerBytes) throw new AnswerTooLargeError("answer", on.maxAnswerBytes, received);
      markFirstByte();
      const flowing = relay(parser.push(chunk));
      if (unnamed) {
        const summary = meter.summary();
        if (summary.responseId !== undefined) {
          unnamed = false;
          on.nameResponse(summary);
        }
      }
      return flowing ? undefined : writer.drained(clientGone);
    });
    relay(parser.flush());
  } catch (error) {
    const summary = meter.summary();
    const answered = meter.complete ? "whole" : "cut";
    if (clientGone.aborted) {
      return record({
        ...clientAborted(summary.usage, summary.model ?? call.model),
        answered,
        seenOutputTokens: relayed,
      });
    }
    if (error instanceof AnswerTooLargeError) {
      // Cut off at the bound: what was relayed stands, charged as any answer cut midway.
      record({
        ...tooLarge(
          error,
          summary.usage,
          summary.model ?? call.model,
          response.statusCode,
          answered,
          relayed,
        ),
        responseId: summary.responseId,
      });
      const refusal = answerTooLarge(error);
      endStreamWithError(call, refusal.message, refusal);
      return;
    }
    if (meter.errorEvent !== undefined) {
      // The provider said why before it hung up, and the client already has its words.
      record(streamError(response.statusCode, meter, summary, call.model, secrets, relayed));
      writer.end();
      return;
    }
    const message = `The provider's connection broke before the stream was complete: ${(error as Error).message}`;
    record(
      upstreamReset(
        message,
        summary.usage,
        summary.model ?? call.model,
        response.statusCode,
        answered,
        relayed,
      ),
    );
    endStreamWithError(call, message, { type: "server_error", code: "upstream_reset" });
    return;
  }
  const summary = meter.summary();
  if (meter.errorEvent !== undefined) {
    // The client already has the provider's own error event; record what it said.
    record(streamError(response.statusCode, meter, summary, call.model, secrets, relayed));
    writer.end(held);
    return;
  }
  if (!meter.complete) {
    const message = "The provider ended the stream before it was complete.";
    record(
      upstreamReset(message, summary.usage, summary.model ?? call.model, response.statusCode, "cut", relayed),
    );
    endStreamWithError(call, message, { type: "server_error", code: "upstream_reset" });
    return;
  }
  const answer = answerOf(summary);
  record({ kind: "completed", status: response.statusCode, answer, seenOutputTokens: relayed });
  const delivery = await hooks.deliver(call, answer);
  if (delivery.kind === "refuse") {
    endStreamWithError(call, delivery.error.message, delivery.error);
    return;
  }
  if (on.shared) await outcomeOnItsWay(on.ledger);
  writer.end(held);
}

/**
 * Feeds each chunk of a body to `onChunk` as it arrives, pausing while the promise it
 * returns (backpressure) is pending. Chunks are taken as 'data' events, not through an
 * async iterator: an iterator drops a chunk still buffered when the connection breaks
 * right after it, and that last chunk is often the provider's own error event.
 */
function readChunks(
  body: Readable,
  clientGone: AbortSignal,
  onChunk: (chunk: Buffer) => Promise<void> | undefined,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const gone = () => {
      body.destroy();
      reject(new Error("client gone"));
    };
    if (clientGone.aborted) return gone();
    clientGone.addEventListener("abort", gone, { once: true });
    const settle = () => clientGone.removeEventListener("abort", gone);
    body.on("data", (chunk: Buffer) => {
      let wait: Promise<void> | undefined;
      try {
        wait = onChunk(chunk);
      } catch (error) {
        // The chunk cannot be taken (past a bound): nothing more is read.
        settle();
        body.destroy();
        reject(error);
        return;
      }
      if (wait === undefined) return;
      body.pause();
      void wait.then(() => body.resume());
    });
    body.once("end", () => {
      settle();
      resolve();
    });
    body.once("error", (error) => {
      settle();
      reject(error);
    });
  });
}

function startCommand(call: Call, deps: PipelineDeps, labels: RunLabels): StartStep {
  return redactSecretsDeep(
    {
      type: "StartStep",
      stepId: call.stepId,
      api: call.api,
      model: call.view.model,
      stream: call.view.stream,
      identity: call.run.identity,
      messageCount: call.view.messageCount,
      upstream: call.upstream.origin,
      gateway: deps.instanceId,
      estimatedInputTokens: call.estimatedInputTokens,
      promptHash: call.run.promptHash,
      reservedNanoUsd: call.reservedNanoUsd,
      budgetLeases: [...call.budgetLeases],
      prediction: call.prediction,
      ...(call.route === undefined ? {} : { route: call.route.choice }),
      tag: labels.tag,
      limits: deps.admission.limitsFor(labels.tag),
      rules: deps.admission.rules(),
    },
    call.secrets,
  );
}

function outcomeCommand(
  call: Call,
  ending: Ending,
  latencyMs: number,
  firstByteMs: number,
  deps: Pick<PipelineDeps, "pricer" | "ledger" | "admission">,
): Extract<RunCommand, { type: "CompleteStep" | "FailStep" }> {
  const said = ending.kind === "completed" ? ending.answer.summary : ending;
  const model = said.model ?? call.model;
  const metered = meterOutcome(
    {
      model,
      provider: call.upstream.provider,
      usage: said.usage,
      answered: ending.kind === "completed" ? "whole" : ending.answered,
      estimatedInputTokens: call.estimatedInputTokens,
      seenOutputTokens: ending.seenOutputTokens,
      run: deps.ledger.cached(call.run.runId),
      costControlled: () => deps.admission.costControlled(call.run.runId, call.run.tag),
    },
    deps.pricer,
  );
  const outcome = {
    model,
    upstreamStatus: ending.status,
    usage: { ...metered.usage },
    cost: metered.cost,
    latencyMs,
    firstByteMs,
    responseId: said.responseId ?? "",
    estimated: metered.estimated,
    usageEstimate: metered.usageEstimate,
    usageProblem: metered.usageProblem,
    unknownPrice: metered.unknownPrice,
  };
  if (ending.kind === "completed") {
    const { summary, toolCallsSignature } = ending.answer;
    return {
      type: "CompleteStep",
      stepId: call.stepId,
      outcome,
      finishReason: summary.finishReason ?? "",
      toolCalls: summary.toolCalls.map((toolCall) => toolCall.name),
      toolCallsSignature,
    };
  }
  return {
    type: "FailStep",
    stepId: call.stepId,
    outcome,
    reason: ending.reason,
    errorType: ending.error.type,
    errorCode: ending.error.code ?? "",
    errorMessage: ending.error.message,
  };
}

function streamError(
  status: number,
  meter: StreamMeter,
  summary: AnswerSummary,
  requestedModel: string,
  secrets: readonly string[],
  relayed: number,
): Failed {
  return {
    kind: "failed",
    reason: FailureReason.FAILURE_REASON_UPSTREAM_STREAM_ERROR,
    status,
    error: readProviderError(status, meter.errorEvent ?? "", secrets),
    usage: summary.usage,
    model: summary.model ?? requestedModel,
    responseId: summary.responseId,
    // A failed response that still ended its stream (Responses' response.failed) says its usage.
    answered: meter.complete ? "whole" : "cut",
    seenOutputTokens: relayed,
  };
}

/** The client left; before any answer came, unless the caller says how much of one it had. */
function clientAborted(usage: UsageReport, model: string | undefined): Failed {
  return {
    kind: "failed",
    reason: FailureReason.FAILURE_REASON_CLIENT_ABORTED,
    status: 0,
    error: {
      type: "client_aborted",
      code: null,
      message: "The client closed the connection before the response was complete.",
    },
    usage,
    model,
    responseId: undefined,
    answered: "none",
    seenOutputTokens: 0,
  };
}

function upstreamReset(
  message: string,
  usage: UsageReport,
  model: string | undefined,
  status: number,
  answered: Answered,
  seenOutputTokens: number,
): Failed {
  return {
    kind: "failed",
    reason: FailureReason.FAILURE_REASON_UPSTREAM_RESET,
    status,
    error: { type: "upstream_reset", code: null, message },
    usage,
    model,
    responseId: undefined,
    answered,
    seenOutputTokens,
  };
}

/** A 2xx whose body is not its API's answer (not JSON, not an object). */
function invalidAnswer(status: number, model: string, seenOutputTokens: number): Failed {
  return {
    kind: "failed",
    reason: FailureReason.FAILURE_REASON_UPSTREAM_INVALID_ANSWER,
    status,
    error: {
      type: "invalid_answer",
      code: null,
      message: `The provider answered ${status} with a body that is not a JSON object; it was passed to the client as sent.`,
    },
    usage: NO_USAGE,
    model,
    responseId: undefined,
    answered: "unreadable",
    seenOutputTokens,
  };
}

/** An answer cut off at one of the gateway's bounds (gateway.max_answer_bytes, max_event_bytes). */
function tooLarge(
  error: AnswerTooLargeError,
  usage: UsageReport,
  model: string | undefined,
  status: number,
  answered: Answered,
  seenOutputTokens: number,
): Failed {
  return {
    kind: "failed",
    reason: FailureReason.FAILURE_REASON_UPSTREAM_TOO_LARGE,
    status,
    error: {
      type: "upstream_too_large",
      code: error.what === "answer" ? "max_answer_bytes" : "max_event_bytes",
      message: tooLargeMessage(error),
    },
    usage,
    model,
    responseId: undefined,
    answered,
    seenOutputTokens,
  };
}

/** What the client is told of an answer cut off at a bound, in its API's shape. */
function answerTooLarge(error: AnswerTooLargeError): UpstreamAnswerTooLargeError {
  return new UpstreamAnswerTooLargeError(tooLargeMessage(error), { cause: error });
}

function tooLargeMessage(error: AnswerTooLargeError): string {
  return error.what === "answer"
    ? `The provider's answer was larger than ${error.limitBytes} bytes (gateway.max_answer_bytes, decompressed): Holdfast cut it off there.`
    : `An event of the provider's stream was larger than ${error.limitBytes} bytes (gateway.max_event_bytes): Holdfast cut the stream off there.`;
}

/** Output tokens estimated from how much of an answer was received (about four characters a token). */
function seenTokens(bytes: number): number {
  return Math.ceil(bytes / CHARS_PER_TOKEN);
}

function logUnavailable(cause?: unknown): GatewayError {
  return new LogUnavailableError(
    "Holdfast could not record this call in its event log, so it was not sent to the provider. Retry shortly.",
    { cause },
  );
}

/** An answer as the hooks before delivery and its outcome see it. */
function answerOf(summary: AnswerSummary): Answer {
  return { summary, toolCallsSignature: toolCallsSignature(summary.toolCalls) };
}

/** The body to forward: the client's bytes, unless the shape must change it (usage opt-in). */
function upstreamBodyOf(shape: ApiShape, body: unknown, view: RequestView, raw: Buffer): Buffer {
  return shape.upstreamBody(body as Record<string, unknown>, view, raw) ?? raw;
}

function parseJson(raw: Buffer | undefined, maxDepth: number): unknown {
  if (raw === undefined || raw.length === 0) {
    throw new InvalidRequestError("The request body is empty; expected a JSON object.");
  }
  let body: unknown;
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch (error) {
    throw new InvalidRequestError(
      `We could not parse the JSON body of your request: ${(error as Error).message}`,
    );
  }
  // Refused here, before the request is read, identified, recorded or forwarded.
  if (jsonDepthExceeds(body, maxDepth)) throw new JsonTooDeepError(maxDepth);
  return body;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

// Where providers take the key: OpenAI and most others (Authorization: Bearer), Anthropic
// (x-api-key), Azure OpenAI (api-key), Google (x-goog-api-key).
const KEY_HEADERS = ["x-api-key", "api-key", "x-goog-api-key"] as const;

/**
 * Credentials in this request, so that anything echoing them can be scrubbed: the
 * provider's key first (what the provider is sent; "" when the call has none), then a
 * tenant's Holdfast key, which is no provider's key but is never recorded either.
 */
function credentialsOf(headers: IncomingHttpHeaders): string[] {
  const found: string[] = [];
  const auth = headers.authorization;
  if (typeof auth === "string") found.push(auth.replace(/^(Bearer|Basic)\s+/i, "").trim());
  for (const name of KEY_HEADERS) {
    const key = headers[name];
    if (typeof key === "string") found.push(key.trim());
  }
  const secrets = found.filter((s) => s.length > 0);
  const holdfastKey = headers["x-holdfast-key"];
  if (typeof holdfastKey === "string" && holdfastKey.trim() !== "") {
    if (secrets.length === 0) secrets.push("");
    secrets.push(holdfastKey.trim());
  }
  return secrets;
}
