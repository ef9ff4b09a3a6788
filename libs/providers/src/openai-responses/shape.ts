import { openAIErrorBody } from "../error-shape.js";
import { parseObject } from "../json.js";
import type { ApiShape, ErrorFields, StreamSoFar } from "../shape.js";
import { formatSseEvent } from "../sse.js";
import { responsesConversation } from "./conversation.js";
import { readResponsesRequest } from "./request.js";
import { ResponsesStreamMeter, summarizeResponse } from "./response.js";

/** OpenAI Responses: `POST /v1/responses`. */
export const openAIResponsesShape: ApiShape = {
  name: "openai_responses",
  family: "openai",
  path: "/v1/responses",
  upstreamPath: "/responses",
  continues: true,
  readRequest: readResponsesRequest,
  // Every Responses stream ends with its usage: the client's bytes go as they came.
  upstreamBody: () => undefined,
  summarize: summarizeResponse,
  streamMeter: () => new ResponsesStreamMeter(),
  errorBody: openAIErrorBody,
  streamErrorEvent: responsesErrorEvent,
  conversation: responsesConversation,
};

/**
 * An `error` event as the Responses API sends one inside a stream: the error nested under
 * `error`, which is what the official SDKs raise as an APIError (they raise any event
 * whose data has an `error`). The API reference documents the fields flat instead
 * (`ResponseErrorEvent`: `code`, `message`, `param`), so they are given there too, for
 * clients written against the reference. Like every event of the stream it carries a
 * `sequence_number`, the next after the provider's last event the client was sent (0
 * when it has none): the Vercel AI SDK, among others, validates the field and raises a
 * parse error in place of the error the event carries when it is missing.
 */
export function responsesErrorEvent(message: string, fields?: ErrorFields, sent?: StreamSoFar): string {
  const { error } = openAIErrorBody(message, fields);
  return formatSseEvent("error", {
    type: "error",
    sequence_number: nextSequence(sent),
    code: error.code,
    message: error.message,
    param: error.param,
    error,
  });
}

/**
 * The number of the event that follows `sent`: one past the last event's own number, or,
 * from a provider that does not number its events, the count so far (OpenAI numbers them
 * from 0, one by one).
 */
function nextSequence(sent: StreamSoFar | undefined): number {
  if (sent === undefined || sent.events === 0) return 0;
  const data = sent.last?.data;
  const last = data === undefined ? undefined : parseObject(data)?.sequence_number;
  return typeof last === "number" && Number.isSafeInteger(last) && last >= 0 ? last + 1 : sent.events;
}
