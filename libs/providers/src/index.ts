export type { AnthropicRequestResult, AnthropicRequestView } from "./anthropic-messages/request.js";
export { readAnthropicRequest } from "./anthropic-messages/request.js";
export { AnthropicStreamMeter, summarizeAnthropicMessage } from "./anthropic-messages/response.js";
export { anthropicMessagesShape } from "./anthropic-messages/shape.js";
export { readAnthropicUsage } from "./anthropic-messages/usage.js";
export type { CompactionPlan, ConversationShape } from "./conversation.js";
export {
  applyCompaction,
  planCompaction,
  prefixHash,
  SUMMARY_INSTRUCTIONS,
  transcriptOf,
} from "./conversation.js";
export type {
  AnthropicErrorBody,
  OpenAIErrorBody,
  OpenAIErrorFields,
  ProviderError,
} from "./error-shape.js";
export { anthropicErrorBody, openAIErrorBody, readProviderError } from "./error-shape.js";
export { AnswerTooLargeError, InvalidPriceOverrideError, ProvidersError } from "./errors.js";
export type { ChatRequestResult, ChatRequestView } from "./openai-chat/request.js";
export { readChatRequest, withStreamUsage } from "./openai-chat/request.js";
export type { ChatChunkObservation } from "./openai-chat/response.js";
export { ChatStreamMeter, summarizeChatCompletion } from "./openai-chat/response.js";
export { openAIChatShape } from "./openai-chat/shape.js";
export { readChatUsage } from "./openai-chat/usage.js";
export type { ResponsesRequestResult, ResponsesRequestView } from "./openai-responses/request.js";
export { readResponsesRequest } from "./openai-responses/request.js";
export { ResponsesStreamMeter, summarizeResponse } from "./openai-responses/response.js";
export { openAIResponsesShape } from "./openai-responses/shape.js";
export { readResponsesUsage } from "./openai-responses/usage.js";
export type { PriceInput, PriceOverride, PriceResult, Pricer, PricerOptions } from "./prices.js";
export { createPricer, DEFAULT_UNKNOWN_USD_PER_MTOK, MAX_NANO_USD, providerFromUpstream } from "./prices.js";
export { redactKnownSecrets, redactSecretsDeep, scrubSecrets } from "./secrets.js";
export type {
  AnswerSummary,
  ApiShape,
  ErrorFields,
  ProviderFamily,
  RequestProblem,
  RequestRead,
  RequestView,
  ShapeName,
  StreamMeter,
  StreamObservation,
  StreamSoFar,
  ToolCall,
} from "./shape.js";
export { SHAPES, shapeNamed } from "./shapes.js";
export type { SseEvent } from "./sse.js";
export {
  formatSseComment,
  formatSseData,
  formatSseEvent,
  SSE_DONE,
  SseParser,
  type SseParserOptions,
} from "./sse.js";
export type { UsageReport } from "./usage.js";
export { MAX_TOKENS_PER_CALL, NO_USAGE, UsageCheck } from "./usage.js";
