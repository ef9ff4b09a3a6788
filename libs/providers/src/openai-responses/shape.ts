import { openAIErrorBody } from "../error-shape.js";
import type { ApiShape, ErrorFields } from "../shape.js";
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
 * clients written against the reference. `sequence_number` is left out: the gateway does
 * not number the provider's events, and a made-up number could read as a replay.
 */
export function responsesErrorEvent(message: string, fields?: ErrorFields): string {
  const { error } = openAIErrorBody(message, fields);
  return formatSseEvent("error", {
    type: "error",
    code: error.code,
    message: error.message,
    param: error.param,
    error,
  });
}
