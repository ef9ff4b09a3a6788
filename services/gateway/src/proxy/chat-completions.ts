import { once } from "node:events";
import type { IncomingHttpHeaders } from "node:http";
import { brotliDecompressSync, gunzipSync, inflateSync } from "node:zlib";
import { Api, type EventPayload, FailureReason, type RunIdentity, type StepStarted } from "@holdfast/events";
import {
  type AnswerSummary,
  type ChatRequestView,
  ChatStreamMeter,
  formatSseData,
  NO_USAGE,
  openAIErrorBody,
  type Pricer,
  readChatRequest,
  readProviderError,
  redactSecretsDeep,
  SseParser,
  summarizeChatCompletion,
  type UsageReport,
  withStreamUsage,
} from "@holdfast/providers";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Dispatcher } from "undici";
import {
  InvalidRequestError,
  LogUnavailableError,
  UpstreamTimeoutError,
  UpstreamUnreachableError,
} from "../errors.js";
import { RequestHeaders } from "../http/headers.js";
import type { RunLedger } from "../ledger/ledger.js";
import { forwardHeaders, isTimeout, returnHeaders, type Upstream } from "../upstream/upstream.js";

export interface ResolvedRun {
  runId: string;
  identity: RunIdentity;
  tag: string;
}

export interface ChatCompletionsDeps {
  ledger: RunLedger;
  upstream: Upstream;
  pricer: Pricer;
  /** Provider name for pricing, from the upstream's host; undefined for self-hosted. */
  provider: string | undefined;
  instanceId: string;
  newId: () => string;
  /** Longest wait for an outcome to reach the log before the client gets the end of its answer. */
  recordWaitMs: number;
  /** Which run (and tag) a call belongs to. */
  resolveRun: (headers: RequestHeaders, body: unknown, view: ChatRequestView) => Promise<ResolvedRun>;
  onRecordError: (error: unknown, runId: string) => void;
}

type Outcome =
  | {
      kind: "completed";
      status: number;
      summary: AnswerSummary;
    }
  | {
      kind: "failed";
      reason: FailureReason;
      status: number;
      errorType: string;
      errorCode: string;
      message: string;
      usage: UsageReport;
      model: string | undefined;
    };

/**
 * POST /v1/chat/completions: identify the run, record the step before forwarding,
 * forward to the provider, give the client exactly what the provider answered (streamed
 * as it arrives), then record the outcome with usage and cost off the request path.
 */
export function registerChatCompletions(app: FastifyInstance, deps: ChatCompletionsDeps): void {
  app.post("/v1/chat/completions", (request, reply) => handle(request, reply, deps));
}

async function handle(
  request: FastifyRequest,
  reply: FastifyReply,
  deps: ChatCompletionsDeps,
): Promise<void> {
  const t0 = performance.now();
  // The client going away aborts the upstream call: nobody would read the answer.
  const abort = new AbortController();
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) abort.abort();
  });
  const raw = request.body as Buffer;
  const body = parseJson(raw);
  const read = readChatRequest(body);
  if (!read.ok) throw new InvalidRequestError(read.error.message, { param: read.error.param });
  const view = read.request;
  const run = await deps.resolveRun(new RequestHeaders(request.raw.rawHeaders), body, view);
  // The credentials of this call, kept out of everything recorded about it.
  const secrets = credentialsOf(request.headers);

  // Usage on a stream is only sent when asked for; ask on the client's behalf so every
  // stream is metered, and hide the extra chunk from a client that did not ask.
  const upstreamBody =
    view.stream && !view.clientWantsUsage
      ? Buffer.from(JSON.stringify(withStreamUsage(body as Record<string, unknown>)))
      : raw;

  let started: StepStarted;
  const stepId = deps.newId();
  try {
    const { event } = await deps.ledger.append(run.runId, run.tag, (state) =>
      redactSecretsDeep<EventPayload>(
        {
          $case: "stepStarted",
          value: {
            stepId,
            step: state.steps.length + 1,
            api: Api.API_OPENAI_CHAT_COMPLETIONS,
            model: view.model,
            stream: view.stream,
            identity: run.identity,
            messageCount: view.messageCount,
            upstream: deps.upstream.origin,
            gateway: deps.instanceId,
          },
        },
        secrets,
      ),
    );
    started = (event.payload as Extract<EventPayload, { $case: "stepStarted" }>).value;
  } catch (cause) {
    throw new LogUnavailableError(
      "Holdfast could not record this call in its event log, so it was not sent to the provider. Retry shortly.",
      { cause },
    );
  }

  let firstByteMs = 0;
  const markFirstByte = () => {
    if (firstByteMs === 0) firstByteMs = Math.max(1, Math.round(performance.now() - t0));
  };
  // The outcome is in the log before the client has the whole answer, so an answered
  // call is always a metered one, even if this process dies the next moment. While the
  // log is unreachable the wait is bounded (the append keeps retrying behind it).
  const finish = (outcome: Outcome): Promise<void> => {
    const latencyMs = Math.round(performance.now() - t0);
    const recorded = deps.ledger
      .record(run.runId, run.tag, () =>
        redactSecretsDeep(outcomeEvent(started, outcome, latencyMs, firstByteMs, view, deps), secrets),
      )
      .then(
        () => undefined,
        (error: unknown) => deps.onRecordError(error, run.runId),
      );
    let timer: NodeJS.Timeout | undefined;
    const bounded = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, deps.recordWaitMs);
    });
    return Promise.race([recorded, bounded]).finally(() => clearTimeout(timer));
  };

  let upstream: Dispatcher.ResponseData;
  try {
    upstream = await deps.upstream.request({
      path: "/chat/completions",
      method: "POST",
      headers: forwardHeaders(request.headers, upstreamBody.length),
      body: upstreamBody,
      signal: abort.signal,
    });
  } catch (error) {
    if (abort.signal.aborted) {
      void finish(clientAborted(NO_USAGE, view.model));
      return;
    }
    const timedOut = isTimeout(error);
    const message = timedOut
      ? "The provider did not answer in time."
      : `The provider could not be reached: ${(error as Error).message}`;
    await finish({
      kind: "failed",
      reason: FailureReason.FAILURE_REASON_UPSTREAM_UNREACHABLE,
      status: 0,
      errorType: timedOut ? "timeout" : "unreachable",
      errorCode: (error as { code?: string }).code ?? "",
      message,
      usage: NO_USAGE,
      model: view.model,
    });
    throw timedOut
      ? new UpstreamTimeoutError(message, { cause: error })
      : new UpstreamUnreachableError(message, { cause: error });
  }

  const contentType = String(upstream.headers["content-type"] ?? "");
  if (upstream.statusCode < 300 && contentType.startsWith("text/event-stream")) {
    await relayStream(upstream, reply, view, abort.signal, markFirstByte, finish, secrets);
    return;
  }

  let bytes: Buffer;
  try {
    bytes = Buffer.from(await upstream.body.arrayBuffer());
    markFirstByte();
  } catch (error) {
    if (abort.signal.aborted) {
      void finish(clientAborted(NO_USAGE, view.model));
      return;
    }
    const message = `The provider's connection broke before the response was complete: ${(error as Error).message}`;
    await finish(upstreamReset(message, NO_USAGE, view.model, upstream.statusCode));
    throw new UpstreamUnreachableError(message, { cause: error });
  }

  const text = decodeBody(bytes, upstream.headers["content-encoding"]);
  if (upstream.statusCode >= 300) {
    const error = readProviderError(upstream.statusCode, text, secrets);
    await finish({
      kind: "failed",
      reason: FailureReason.FAILURE_REASON_UPSTREAM_STATUS,
      status: upstream.statusCode,
      errorType: error.type,
      errorCode: error.code ?? "",
      message: error.message,
      usage: NO_USAGE,
      model: view.model,
    });
  } else {
    await finish({
      kind: "completed",
      status: upstream.statusCode,
      summary: summarizeChatCompletion(safeJson(text)),
    });
  }
  reply.code(upstream.statusCode).headers(returnHeaders(upstream.headers, bytes.length)).send(bytes);
}

/**
 * Passes an SSE response through event by event, as each arrives. Every event is
 * forwarded byte for byte except the usage-only chunk the gateway asked for on the
 * client's behalf. Backpressure from a slow client slows the read from the provider.
 * The terminating `[DONE]` is held back until the outcome is recorded.
 */
async function relayStream(
  upstream: Dispatcher.ResponseData,
  reply: FastifyReply,
  view: ChatRequestView,
  clientGone: AbortSignal,
  markFirstByte: () => void,
  finish: (outcome: Outcome) => Promise<void>,
  secrets: readonly string[],
): Promise<void> {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(upstream.statusCode, returnHeaders(upstream.headers, undefined));
  const parser = new SseParser();
  const meter = new ChatStreamMeter();
  let sawDone = false;
  // `[DONE]` and anything after it, written once the outcome is in the log.
  let held = "";
  const relay = (events: ReturnType<SseParser["push"]>) => {
    let out = "";
    for (const event of events) {
      if (event.data !== undefined) {
        if (event.data === "[DONE]") sawDone = true;
        else if (meter.observe(event.data).usageOnly && !view.clientWantsUsage) continue;
      }
      if (sawDone) held += event.raw;
      else out += event.raw;
    }
    return out.length === 0 || res.write(out);
  };
  try {
    for await (const chunk of upstream.body) {
      markFirstByte();
      if (!relay(parser.push(chunk as Buffer))) await once(res, "drain", { signal: clientGone });
    }
    relay(parser.flush());
  } catch (error) {
    const summary = meter.summary();
    if (clientGone.aborted) {
      void finish(clientAborted(summary.usage, summary.model ?? view.model));
      return;
    }
    const message = `The provider's connection broke before the stream was complete: ${(error as Error).message}`;
    await finish(upstreamReset(message, summary.usage, summary.model ?? view.model, upstream.statusCode));
    endWithError(res, message);
    return;
  }
  const summary = meter.summary();
  if (meter.errorEvent !== undefined) {
    // The client already has the provider's own error event; record what it said.
    const error = readProviderError(upstream.statusCode, meter.errorEvent, secrets);
    await finish({
      kind: "failed",
      reason: FailureReason.FAILURE_REASON_UPSTREAM_STREAM_ERROR,
      status: upstream.statusCode,
      errorType: error.type,
      errorCode: error.code ?? "",
      message: error.message,
      usage: summary.usage,
      model: summary.model ?? view.model,
    });
    res.end(held);
    return;
  }
  if (!sawDone && summary.finishReason === undefined) {
    const message = "The provider ended the stream before it was complete.";
    await finish(upstreamReset(message, summary.usage, summary.model ?? view.model, upstream.statusCode));
    endWithError(res, message);
    return;
  }
  await finish({ kind: "completed", status: upstream.statusCode, summary });
  res.end(held);
}

/** Ends a stream with an error event in the provider's shape, which SDKs raise as an error. */
function endWithError(res: FastifyReply["raw"], message: string): void {
  if (res.destroyed || res.writableEnded) return;
  res.end(formatSseData(openAIErrorBody(message, { type: "server_error", code: "upstream_reset" })));
}

function outcomeEvent(
  started: StepStarted,
  outcome: Outcome,
  latencyMs: number,
  firstByteMs: number,
  view: ChatRequestView,
  deps: ChatCompletionsDeps,
): EventPayload {
  const common = {
    stepId: started.stepId,
    step: started.step,
    api: Api.API_OPENAI_CHAT_COMPLETIONS,
    latencyMs,
    firstByteMs,
    stream: view.stream,
  };
  if (outcome.kind === "completed") {
    const { summary } = outcome;
    const model = summary.model ?? view.model;
    return {
      $case: "stepCompleted",
      value: {
        ...common,
        model,
        upstreamStatus: outcome.status,
        usage: { ...summary.usage },
        cost: deps.pricer.price({ model, usage: summary.usage, provider: deps.provider }),
        finishReason: summary.finishReason ?? "",
        toolCalls: summary.toolCalls.map((call) => call.name),
      },
    };
  }
  const model = outcome.model ?? view.model;
  // A provider bills no tokens for a call it refused; a call cut off midway consumed an
  // unknown amount unless usage arrived before the break.
  const cost =
    outcome.reason === FailureReason.FAILURE_REASON_UPSTREAM_STATUS
      ? { known: true, nanoUsd: 0 }
      : deps.pricer.price({ model, usage: outcome.usage, provider: deps.provider });
  return {
    $case: "stepFailed",
    value: {
      ...common,
      model,
      upstreamStatus: outcome.status,
      reason: outcome.reason,
      errorType: outcome.errorType,
      errorCode: outcome.errorCode,
      errorMessage: outcome.message,
      usage: { ...outcome.usage },
      cost,
    },
  };
}

function clientAborted(usage: UsageReport, model: string | undefined): Outcome {
  return {
    kind: "failed",
    reason: FailureReason.FAILURE_REASON_CLIENT_ABORTED,
    status: 0,
    errorType: "client_aborted",
    errorCode: "",
    message: "The client closed the connection before the response was complete.",
    usage,
    model,
  };
}

function upstreamReset(
  message: string,
  usage: UsageReport,
  model: string | undefined,
  status: number,
): Outcome {
  return {
    kind: "failed",
    reason: FailureReason.FAILURE_REASON_UPSTREAM_RESET,
    status,
    errorType: "upstream_reset",
    errorCode: "",
    message,
    usage,
    model,
  };
}

function parseJson(raw: Buffer | undefined): unknown {
  if (raw === undefined || raw.length === 0) {
    throw new InvalidRequestError("The request body is empty; expected a JSON object.");
  }
  try {
    return JSON.parse(raw.toString("utf8"));
  } catch (error) {
    throw new InvalidRequestError(
      `We could not parse the JSON body of your request: ${(error as Error).message}`,
    );
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The response as text, undoing a compression the provider applied anyway. */
function decodeBody(bytes: Buffer, encoding: string | string[] | undefined): string {
  try {
    switch (String(encoding ?? "").toLowerCase()) {
      case "gzip":
        return gunzipSync(bytes).toString("utf8");
      case "deflate":
        return inflateSync(bytes).toString("utf8");
      case "br":
        return brotliDecompressSync(bytes).toString("utf8");
      default:
        return bytes.toString("utf8");
    }
  } catch {
    return "";
  }
}

/** Credentials in this request, so that error text echoing them can be scrubbed. */
function credentialsOf(headers: IncomingHttpHeaders): string[] {
  const found: string[] = [];
  const auth = headers.authorization;
  if (typeof auth === "string") found.push(auth.replace(/^Bearer\s+/i, "").trim());
  const key = headers["x-api-key"];
  if (typeof key === "string") found.push(key.trim());
  return found.filter((s) => s.length > 0);
}
