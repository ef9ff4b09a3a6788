import type { Readable } from "node:stream";
import { toolCallsSignature } from "@holdfast/gate";
import {
  type AnswerSummary,
  AnswerTooLargeError,
  NO_USAGE,
  readProviderError,
  type SseEvent,
  SseParser,
  type StreamMeter,
} from "@holdfast/providers";
import type { Dispatcher } from "undici";
import { UpstreamUnreachableError } from "../errors.js";
import { renamedBody, renamedEvent } from "../routing/rename.js";
import { decodedStream, readAnswer } from "../upstream/answer.js";
import { returnHeaders } from "../upstream/upstream.js";
import type { PipelineDeps } from "./call.js";
import {
  answerTooLarge,
  clientAborted,
  type Ending,
  invalidAnswer,
  providerRefused,
  refusalReply,
  seenTokens,
  streamError,
  tooLarge,
  upstreamReset,
} from "./finish.js";
import type { Answer } from "./hooks.js";
import type { CallState } from "./state.js";

const NOBODY = Object.freeze({ kind: "none" as const });

/**
 * The relay stage: the provider's answer to the client, streamed (an SSE answer, event by
 * event) or buffered (read whole, then sent), metered as it comes. Resolves with how the
 * call ended, for finish to record and answer (the end of the answer waits there for the
 * decision before delivery).
 */
export function relay(
  call: CallState,
  deps: PipelineDeps,
  response: Dispatcher.ResponseData,
): Promise<Ending> {
  const contentType = String(response.headers["content-type"] ?? "");
  if (response.statusCode < 300 && contentType.startsWith("text/event-stream")) {
    return relayStream(call, deps, response, call.shape.streamMeter(call.view));
  }
  return relayBuffered(call, deps, response);
}

/**
 * A follow-up naming this response (previous_response_id) may reach any gateway as soon
 * as the client has the answer: publish which run it belongs to the moment the provider
 * names it, before the answer is delivered, without waiting for the write.
 */
function nameResponse(call: CallState, deps: PipelineDeps, summary: Pick<AnswerSummary, "responseId">): void {
  if (call.named || summary.responseId === undefined || !call.shape.continues) return;
  call.named = true;
  deps.responses
    .remember(summary.responseId, call.run.runId)
    .catch((error: unknown) => deps.onRecordError(error, call.run.runId));
}

async function relayBuffered(
  call: CallState,
  deps: PipelineDeps,
  response: Dispatcher.ResponseData,
): Promise<Ending> {
  let bytes: Buffer;
  let text: string;
  try {
    ({ bytes, text } = await readAnswer(response.body, response.headers, deps.maxAnswerBytes));
    call.markFirstByte();
    if (call.capturing > 0) call.captured = { body: text };
  } catch (error) {
    if (call.left) return { outcome: clientAborted(NO_USAGE, call.model), reply: NOBODY };
    if (error instanceof AnswerTooLargeError) {
      // Cut off unread: a 2xx is charged from the estimate (the provider did the work),
      // an error status as the refusal it was.
      const status = response.statusCode;
      const answered = status < 300 ? "unreadable" : "refused";
      return {
        outcome: tooLarge(error, NO_USAGE, call.model, status, answered, seenTokens(error.textBytes)),
        reply: { kind: "error", error: answerTooLarge(error) },
      };
    }
    const message = `The provider's connection broke before the response was complete: ${(error as Error).message}`;
    // The provider wrote its whole answer before sending it: what it did is billed.
    return {
      outcome: upstreamReset(message, NO_USAGE, call.model, response.statusCode, "unreadable", 0),
      reply: { kind: "error", error: new UpstreamUnreachableError(message, { cause: error }) },
    };
  }
  const status = response.statusCode;
  if (status >= 300) {
    const error = readProviderError(status, text, call.secrets);
    return {
      outcome: providerRefused(status, error, call.model),
      reply: refusalReply(call, error, status, returnHeaders(response.headers, bytes.length), bytes),
    };
  }
  const json = safeJson(text);
  const seenOutputTokens = seenTokens(bytes.length);
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    // Not its API's answer: the client gets it as sent, and the step is charged from the
    // estimate (the provider did the work), never recorded as a clean answer.
    return {
      outcome: invalidAnswer(status, call.model, seenOutputTokens),
      reply: { kind: "send", status, headers: returnHeaders(response.headers, bytes.length), body: bytes },
    };
  }
  const summary = call.shape.summarize(json);
  nameResponse(call, deps, summary);
  const outcome = { kind: "completed" as const, status, answer: answerOf(summary), seenOutputTokens };
  // A routed alias's answer names the alias, not the model that served it (unless expose_model).
  const answerModel = call.route?.answerModel;
  if (answerModel === undefined) {
    return {
      outcome,
      reply: { kind: "send", status, headers: returnHeaders(response.headers, bytes.length), body: bytes },
    };
  }
  // Renamed from the decoded text: sent decoded.
  const delivered = renamedBody(Buffer.from(text), answerModel);
  const { "content-encoding": _encoding, ...plain } = response.headers;
  return {
    outcome,
    reply: { kind: "send", status, headers: returnHeaders(plain, delivered.length), body: delivered },
  };
}

/**
 * Passes an SSE answer through event by event as each arrives, byte for byte, except
 * events the shape marks hidden. Backpressure from a slow client slows the read from the
 * provider. The terminal event (and anything after it) is held until the decision before
 * delivery, which finish asks for.
 */
async function relayStream(
  call: CallState,
  deps: PipelineDeps,
  response: Dispatcher.ResponseData,
  meter: StreamMeter,
): Promise<Ending> {
  const { writer } = call;
  const signal = call.signal;
  // A routed alias's stream names the alias, not the model that served it (unless expose_model).
  const answerModel = call.route?.answerModel;
  let unnamed = call.shape.continues;
  // A compressed stream is read (and relayed) as it decompresses.
  const { stream: body, decoded } = decodedStream(response.body, response.headers["content-encoding"]);
  const { "content-encoding": _encoding, ...plain } = response.headers;
  writer.startStream(response.statusCode, returnHeaders(decoded ? plain : response.headers, undefined));
  const parser = new SseParser({ maxEventBytes: deps.maxEventBytes });
  let received = 0;
  let terminal = false;
  let held = "";
  // What the answer had produced as far as it was relayed, should it be cut off: about a
  // token an event, as providers stream them.
  let relayed = 0;
  // The events as received, every one (hidden ones too), for the step's snapshot.
  const capturing = call.capturing;
  const captured = capturing > 0 ? { events: "", omitted: 0 } : undefined;
  call.captured = captured;
  const relayEvents = (events: ReturnType<SseParser["push"]>): boolean => {
    let out = "";
    let count = 0;
    let last: SseEvent | undefined;
    for (const event of events) {
      if (captured !== undefined) {
        // Past the bound a stream is not kept: held whole, a long one would cost its length
        // in memory for as long as it runs.
        if (captured.omitted === 0 && captured.events.length + event.raw.length <= capturing)
          captured.events += event.raw;
        else {
          captured.omitted =
            (captured.omitted || Buffer.byteLength(captured.events)) + Buffer.byteLength(event.raw);
          captured.events = "";
        }
      }
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
    await readChunks(body, signal, (chunk) => {
      received += chunk.length;
      if (received > deps.maxAnswerBytes)
        throw new AnswerTooLargeError("answer", deps.maxAnswerBytes, received);
      call.markFirstByte();
      const flowing = relayEvents(parser.push(chunk));
      if (unnamed) {
        const summary = meter.summary();
        if (summary.responseId !== undefined) {
          unnamed = false;
          nameResponse(call, deps, summary);
        }
      }
      return flowing ? undefined : writer.drained(signal);
    });
    relayEvents(parser.flush());
  } catch (error) {
    const summary = meter.summary();
    const answered = meter.complete ? "whole" : "cut";
    if (signal.aborted) {
      return {
        outcome: {
          ...clientAborted(summary.usage, summary.model ?? call.model),
          answered,
          seenOutputTokens: relayed,
        },
        reply: NOBODY,
      };
    }
    if (error instanceof AnswerTooLargeError) {
      // Cut off at the bound: what was relayed stands, charged as any answer cut midway.
      const refusal = answerTooLarge(error);
      return {
        outcome: {
          ...tooLarge(
            error,
            summary.usage,
            summary.model ?? call.model,
            response.statusCode,
            answered,
            relayed,
          ),
          responseId: summary.responseId,
        },
        reply: { kind: "stream_error", message: refusal.message, fields: refusal },
      };
    }
    if (meter.errorEvent !== undefined) {
      // The provider said why before it hung up, and the client already has its words.
      return {
        outcome: streamError(response.statusCode, meter, summary, call.model, call.secrets, relayed),
        reply: { kind: "end", tail: "" },
      };
    }
    const message = `The provider's connection broke before the stream was complete: ${(error as Error).message}`;
    return {
      outcome: upstreamReset(
        message,
        summary.usage,
        summary.model ?? call.model,
        response.statusCode,
        answered,
        relayed,
      ),
      reply: { kind: "stream_error", message, fields: { type: "server_error", code: "upstream_reset" } },
    };
  }
  const summary = meter.summary();
  if (meter.errorEvent !== undefined) {
    // The client already has the provider's own error event; record what it said.
    return {
      outcome: streamError(response.statusCode, meter, summary, call.model, call.secrets, relayed),
      reply: { kind: "end", tail: held },
    };
  }
  if (!meter.complete) {
    const message = "The provider ended the stream before it was complete.";
    return {
      outcome: upstreamReset(
        message,
        summary.usage,
        summary.model ?? call.model,
        response.statusCode,
        "cut",
        relayed,
      ),
      reply: { kind: "stream_error", message, fields: { type: "server_error", code: "upstream_reset" } },
    };
  }
  return {
    outcome: {
      kind: "completed",
      status: response.statusCode,
      answer: answerOf(summary),
      seenOutputTokens: relayed,
    },
    reply: { kind: "end", tail: held },
  };
}

/**
 * Feeds each chunk of a body to `onChunk` as it arrives, pausing while the promise it
 * returns (backpressure) is pending. Chunks are taken as 'data' events, not through an
 * async iterator: an iterator drops a chunk still buffered when the connection breaks
 * right after it, and that last chunk is often the provider's own error event.
 */
function readChunks(
  body: Readable,
  cancelled: AbortSignal,
  onChunk: (chunk: Buffer) => Promise<void> | undefined,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const gone = () => {
      body.destroy();
      reject(new Error("client gone"));
    };
    if (cancelled.aborted) return gone();
    cancelled.addEventListener("abort", gone, { once: true });
    const settle = () => cancelled.removeEventListener("abort", gone);
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

/** An answer as the features before delivery and its outcome see it. */
function answerOf(summary: AnswerSummary): Answer {
  return { summary, toolCallsSignature: toolCallsSignature(summary.toolCalls) };
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
