export type { OpenAIErrorBody, OpenAIErrorFields, ProviderError } from "./error-shape.js";
export { openAIErrorBody, readProviderError } from "./error-shape.js";
export { InvalidPriceOverrideError, ProvidersError } from "./errors.js";
export type {
  ChatRequestResult,
  ChatRequestView,
  RequestProblem,
} from "./openai-chat/request.js";
export { readChatRequest, withStreamUsage } from "./openai-chat/request.js";
export type { ChatCompletionSummary, StreamObservation } from "./openai-chat/response.js";
export { ChatStreamMeter, summarizeChatCompletion } from "./openai-chat/response.js";
export { readChatUsage } from "./openai-chat/usage.js";
export type { PriceInput, PriceOverride, PriceResult, Pricer, PricerOptions } from "./prices.js";
export { createPricer, providerFromUpstream } from "./prices.js";
export { redactKnownSecrets, redactSecretsDeep, scrubSecrets } from "./secrets.js";
export type { SseEvent } from "./sse.js";
export { formatSseComment, formatSseData, SSE_DONE, SseParser } from "./sse.js";
export type { UsageReport } from "./usage.js";
export { NO_USAGE } from "./usage.js";
