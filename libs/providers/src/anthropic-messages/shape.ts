import { anthropicErrorBody } from "../error-shape.js";
import type { ApiShape } from "../shape.js";
import { formatSseEvent } from "../sse.js";
import { anthropicConversation } from "./conversation.js";
import { readAnthropicRequest } from "./request.js";
import { AnthropicStreamMeter, summarizeAnthropicMessage } from "./response.js";

/** Anthropic Messages: `POST /v1/messages`. */
export const anthropicMessagesShape: ApiShape = {
  name: "anthropic_messages",
  family: "anthropic",
  path: "/v1/messages",
  upstreamPath: "/messages",
  continues: false,
  readRequest: readAnthropicRequest,
  // Every Anthropic stream reports its usage: the client's bytes go as they came.
  upstreamBody: () => undefined,
  summarize: summarizeAnthropicMessage,
  streamMeter: () => new AnthropicStreamMeter(),
  errorBody: anthropicErrorBody,
  // Anthropic's SDKs raise an `event: error` as an APIError of the error's type; they
  // skip data without an event name, so the name is required.
  streamErrorEvent: (message, fields) => formatSseEvent("error", anthropicErrorBody(message, fields)),
  conversation: anthropicConversation,
};
