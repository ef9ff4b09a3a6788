import type { CompleteStep, FailStep, RunState } from "@holdfast/events";
import { FailureReason } from "@holdfast/events";
import type { Usage } from "@holdfast/proto";
import {
  type AnswerSummary,
  type AnswerTooLargeError,
  type ApiShape,
  type ErrorFields,
  NO_USAGE,
  type Pricer,
  type ProviderError,
  readProviderError,
  redactSecretsDeep,
  type StreamMeter,
  type UsageReport,
} from "@holdfast/providers";
import type { RunLabels } from "@holdfast/runs";
import type { FastifyBaseLogger } from "fastify";
import {
  GatewayError,
  InternalGatewayError,
  UpstreamAnswerTooLargeError,
  UpstreamTimeoutError,
  UpstreamUnreachableError,
} from "../errors.js";
import { type Answered, meterOutcome } from "../metering/meter.js";
import { isTimeout } from "../upstream/upstream.js";
import { tokensOf } from "./body.js";
import type { PipelineDeps } from "./call.js";
import type { Amendment, Answer, PipelineHooks } from "./hooks.js";
import { recordOutcome } from "./outcome.js";
import type { CallState } from "./state.js";
import type { ClientSide } from "./writer.js";

/**
 * What is recorded of a started step's end: its answer (metered), or how it failed, how
 * much of an answer there was (for metering), and output tokens estimated from what was
 * relayed or received of it.
 */
export type Outcome =
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
export type Failed = Extract<Outcome, { kind: "failed" }>;

/** How the client is answered, however far its answer got. */
export type Reply =
  /** A whole answer at once (the provider's, as it came or renamed). */
  | { kind: "send"; status: number; headers: Record<string, string | string[]>; body: Buffer | string }
  /** The rest of a stream already relayed (its terminal event, held until the decision before delivery). */
  | { kind: "end"; tail: string }
  /** The gateway's own error, in the API's shape (a stream's error event once its 200 is out). */
  | { kind: "error"; error: GatewayError }
  /** The provider's error, where the client already has a 200: as the stream's error event. */
  | { kind: "stream_error"; message: string; fields: ErrorFields }
  /** Nobody to answer: the client is gone. */
  | { kind: "none" };

/**
 * How a call ended: what its step's outcome is, when a step was started (a call refused,
 * parked and dropped, or left before its start records none: the log never started it),
 * and how its client is answered.
 */
export interface Ending {
  readonly outcome?: Outcome;
  readonly reply: Reply;
}

/** What finishing needs of a call. */
export interface Finishing {
  readonly shape: ApiShape;
  readonly run: { readonly runId: string; readonly tag: string };
  readonly labels: RunLabels;
  readonly stepId: string;
  readonly writer: ClientSide;
  readonly request: { readonly log: FastifyBaseLogger };
  readonly secrets: readonly string[];
  readonly model: string;
  readonly upstream: { readonly provider: string | undefined };
  readonly estimatedInputTokens: number;
  /** When the call arrived (performance.now()). */
  readonly t0: number;
  /** When its answer's first byte came, ms after t0 (0: none came). */
  readonly firstByteMs: number;
  /** Finish has run: a call is finished once. */
  finished: boolean;
}

export interface FinishDeps<C extends Finishing> {
  /** Records a step's outcome, without making the client wait for the log. */
  record(call: C, command: CompleteStep | FailStep): void;
  pricer: Pricer;
  /** The run's state as this gateway has it (metering reads its usual output). */
  cached(runId: string): RunState | undefined;
  costControlled(runId: string, tag: string): boolean;
  /** Another gateway also serves this run: an outcome is put on the log's socket before the answer's end. */
  shared(runId: string): boolean;
  /** Sends the appends issued so far at once (see outcomeOnItsWay). */
  sendAppends(): void;
  hooks: {
    readonly beforeDeliver: { readonly length: number };
    outcome(
      call: C,
      cost: { known: boolean; nanoUsd: number },
      observed: { usage: Usage | undefined; latencyMs: number; status: number },
    ): void;
    deliver(call: C, answer: Answer): Promise<Amendment>;
    ended(call: C): void;
  };
}

/**
 * The one end of every call: records its step's outcome (once, when a step was started),
 * lets the features before delivery decide on an answer (the tool-call gate), answers the
 * client (once, unless it is gone), and tells the features the call is over. Every way a
 * call ends comes here: answered, a provider's error, a provider unreachable, a stream
 * reset midway, a client gone, a stopped run, a refusal, a parked call dropped, the
 * gateway shutting down, a give-up after retries. A second finish of the same call does nothing.
 */
export function finish<C extends Finishing>(
  call: C,
  ending: Ending,
  deps: FinishDeps<C>,
): Promise<void> | undefined {
  if (call.finished) return undefined;
  call.finished = true;
  try {
    const outcome = ending.outcome;
    if (outcome !== undefined) {
      record(call, outcome, deps);
      // A whole answer waits for the decision before delivery, and on a run another gateway
      // serves, for its outcome to be on its way; any other ending is answered at once.
      if (
        outcome.kind === "completed" &&
        (deps.hooks.beforeDeliver.length > 0 || deps.shared(call.run.runId))
      ) {
        return delivered(call, outcome.answer, ending.reply, deps);
      }
    }
    answer(call, ending.reply);
  } catch (error) {
    answer(call, { kind: "error", error: asGatewayError(error, call) });
  }
  deps.hooks.ended(call);
  return undefined;
}

/** Delivers a whole answer once the features before delivery let it go (or answers their refusal). */
async function delivered<C extends Finishing>(
  call: C,
  whole: Answer,
  reply: Reply,
  deps: FinishDeps<C>,
): Promise<void> {
  try {
    let decided = reply;
    if (deps.hooks.beforeDeliver.length > 0) {
      const amendment = await deps.hooks.deliver(call, whole);
      if (amendment.kind === "refuse") decided = { kind: "error", error: amendment.error };
    }
    if (decided.kind !== "error" && deps.shared(call.run.runId)) await outcomeOnItsWay(deps);
    answer(call, decided);
  } catch (error) {
    answer(call, { kind: "error", error: asGatewayError(error, call) });
  } finally {
    deps.hooks.ended(call);
  }
}

/** What finish needs of the pipeline's parts. */
export function finishDeps(deps: PipelineDeps, hooks: PipelineHooks): FinishDeps<CallState> {
  return {
    record: (call, command) => {
      recordOutcome(deps.ledger, call.run.runId, call.labels, command, (error) =>
        deps.onRecordError(error, call.run.runId),
      );
      // The answer's snapshot goes with its outcome.
      deps.snapshots?.answered(call, command.outcome.upstreamStatus);
    },
    pricer: deps.pricer,
    cached: (runId) => deps.ledger.cached(runId),
    costControlled: deps.costControlled,
    shared: (runId) => deps.ledger.shared(runId),
    sendAppends: () => deps.ledger.sendAppends(),
    hooks,
  };
}

/** Any error as one the gateway answers: its own as they are, anything else as a 500 (logged). */
export function asGatewayError(error: unknown, call: Pick<Finishing, "request" | "run">): GatewayError {
  if (error instanceof GatewayError) return error;
  call.request.log.error({ err: error, runId: call.run.runId }, "unexpected gateway error");
  return new InternalGatewayError("Holdfast failed while handling this call.", { cause: error });
}

function record<C extends Finishing>(call: C, outcome: Outcome, deps: FinishDeps<C>): void {
  const latencyMs = Math.round(performance.now() - call.t0);
  const command = redactSecretsDeep(outcomeCommand(call, outcome, latencyMs, deps), call.secrets);
  // Recorded first: a feature's settlement that throws must not keep the outcome from the log.
  deps.record(call, command);
  try {
    deps.hooks.outcome(call, command.outcome.cost, {
      usage: command.outcome.usage,
      latencyMs,
      status: command.outcome.upstreamStatus,
    });
  } catch (error) {
    call.request.log.error(
      { err: error, runId: call.run.runId },
      "a feature failed to settle a call's outcome",
    );
  }
}

/** Answers the client, however far its answer got (a held stream is already 200). */
function answer(call: Finishing, reply: Reply): void {
  const { writer } = call;
  if (reply.kind === "send") writer.send(reply.status, reply.headers, reply.body);
  else if (reply.kind === "end") writer.end(reply.tail);
  else if (reply.kind === "stream_error") errorAnswer(call, reply.message, reply.fields, 502, {});
  else if (reply.kind === "error") {
    const { error } = reply;
    if (error.status >= 500) call.request.log.warn({ err: error }, "call not completed");
    const fields = { type: error.type, code: error.code, param: error.param };
    errorAnswer(call, error.message, fields, error.status, error.headers);
  }
}

/** An error in the call's API's shape: the stream's error event once its 200 is out, a JSON error before. */
function errorAnswer(
  call: Finishing,
  message: string,
  fields: ErrorFields,
  status: number,
  headers: Readonly<Record<string, string>>,
): void {
  if (call.writer.headersSent) {
    endStreamWithError(call, message, fields);
    return;
  }
  call.writer.send(
    status,
    { "content-type": "application/json; charset=utf-8", ...headers },
    JSON.stringify(call.shape.errorBody(message, fields)),
  );
}

/**
 * Ends a stream whose 200 is out with an error, as the call's API shape ends a failed
 * stream, after the provider's events the client already has.
 */
function endStreamWithError(call: Finishing, message: string, fields: ErrorFields): void {
  call.writer.end(call.shape.streamErrorEvent(message, fields, call.writer.streamed));
}

/**
 * Puts an outcome just recorded on the log's socket before the client has the end of its
 * answer (its append is issued in microtasks, which this waits out, and then sent at once
 * rather than at the end of the round; the ack is not waited for). On a run another gateway
 * also serves, a client that goes straight there with the run's next call then usually
 * finds the outcome already folded in, instead of racing it.
 */
async function outcomeOnItsWay(deps: Pick<FinishDeps<Finishing>, "sendAppends">): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
  deps.sendAppends();
}

function outcomeCommand<C extends Finishing>(
  call: C,
  ending: Outcome,
  latencyMs: number,
  deps: FinishDeps<C>,
): CompleteStep | FailStep {
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
      run: deps.cached(call.run.runId),
      costControlled: () => deps.costControlled(call.run.runId, call.run.tag),
    },
    deps.pricer,
  );
  const outcome = {
    model,
    upstreamStatus: ending.status,
    usage: { ...metered.usage },
    cost: metered.cost,
    latencyMs,
    firstByteMs: call.firstByteMs,
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

// The outcomes, as the stages meet them.

/** The provider refused the call (its status ≥ 300): what it said, as it said it. */
export function providerRefused(status: number, error: ProviderError, model: string): Failed {
  return {
    kind: "failed",
    reason: FailureReason.FAILURE_REASON_UPSTREAM_STATUS,
    status,
    error,
    usage: NO_USAGE,
    model,
    responseId: undefined,
    answered: "refused",
    seenOutputTokens: 0,
  };
}

/** The provider's refusal, as the client gets it: as it came, or as the error event of a stream already 200. */
export function refusalReply(
  call: Pick<Finishing, "writer">,
  error: ProviderError,
  status: number,
  headers: Record<string, string | string[]>,
  bytes: Buffer,
): Reply {
  // A held streaming call already answered 200: the provider's error goes as the
  // stream's error event, which the client's SDK raises.
  if (call.writer.headersSent) {
    return { kind: "stream_error", message: error.message, fields: { type: error.type, code: error.code } };
  }
  return { kind: "send", status, headers, body: bytes };
}

export function streamError(
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
export function clientAborted(usage: UsageReport, model: string | undefined): Failed {
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

export function upstreamReset(
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
export function invalidAnswer(status: number, model: string, seenOutputTokens: number): Failed {
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
export function tooLarge(
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
export function answerTooLarge(error: AnswerTooLargeError): UpstreamAnswerTooLargeError {
  return new UpstreamAnswerTooLargeError(tooLargeMessage(error), { cause: error });
}

function tooLargeMessage(error: AnswerTooLargeError): string {
  return error.what === "answer"
    ? `The provider's answer was larger than ${error.limitBytes} bytes (gateway.max_answer_bytes, decompressed): Holdfast cut it off there.`
    : `An event of the provider's stream was larger than ${error.limitBytes} bytes (gateway.max_event_bytes): Holdfast cut the stream off there.`;
}

/** The provider could not be reached (or did not answer in time): recorded, and the client told so. */
export function unreachable(error: unknown, model: string): Required<Ending> {
  const timedOut = isTimeout(error);
  const message = timedOut
    ? "The provider did not answer in time."
    : `The provider could not be reached: ${(error as Error).message}`;
  return {
    outcome: {
      kind: "failed",
      reason: FailureReason.FAILURE_REASON_UPSTREAM_UNREACHABLE,
      status: 0,
      error: {
        type: timedOut ? "timeout" : "unreachable",
        code: (error as { code?: string }).code ?? null,
        message,
      },
      usage: NO_USAGE,
      model,
      responseId: undefined,
      answered: "none",
      seenOutputTokens: 0,
    },
    reply: {
      kind: "error",
      error: timedOut
        ? new UpstreamTimeoutError(message, { cause: error })
        : new UpstreamUnreachableError(message, { cause: error }),
    },
  };
}

/** Output tokens estimated from how much of an answer was received (about four characters a token). */
export function seenTokens(bytes: number): number {
  return tokensOf(bytes);
}

/** A call answered with the gateway's own error, no step outcome recorded (none was started, or it stands as recorded). */
export function refused(error: GatewayError): Ending {
  return { reply: { kind: "error", error } };
}

/** The client left before anything was started: nothing recorded, nobody answered. */
export const LEFT: Ending = Object.freeze({ reply: Object.freeze({ kind: "none" }) });
