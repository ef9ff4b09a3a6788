export type {
  AnthropicErrorBody,
  OpenAIErrorBody,
  OpenAIErrorFields,
  ProviderError,
} from "./error-shape.js";
export { anthropicErrorBody, openAIErrorBody, readProviderError } from "./error-shape.js";
export { InvalidPriceOverrideError, ProvidersError } from "./errors.js";
export type { ChatRequestResult, ChatRequestView } from "./openai-chat/request.js";
export { readChatRequest, withStreamUsage } from "./openai-chat/request.js";
export type { ChatChunkObservation } from "./openai-chat/response.js";
export { ChatStreamMeter, summarizeChatCompletion } from "./openai-chat/response.js";
export { openAIChatShape } from "./openai-chat/shape.js";
export { readChatUsage } from "./openai-chat/usage.js";
export type { PriceInput, PriceOverride, PriceResult, Pricer, PricerOptions } from "./prices.js";
export { createPricer, providerFromUpstream } from "./prices.js";
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
  ToolCall,
} from "./shape.js";
export { SHAPES, shapeNamed } from "./shapes.js";
export type { SseEvent } from "./sse.js";
export { formatSseComment, formatSseData, SSE_DONE, SseParser } from "./sse.js";
export type { UsageReport } from "./usage.js";
export { NO_USAGE } from "./usage.js";
