import type { ProviderError } from "./errors.js";
import type { FakeRequest } from "./exchange.js";
import type { PromptCache } from "./prompt-cache.js";
import type { Clock, RateLimiter, RateLimitState } from "./rate-limit.js";

/** The APIs the fake serves, named as Holdfast's providers library names its shapes. */
export type ApiName =
  | "openai_chat_completions"
  | "openai_responses"
  | "anthropic_messages"
  | "anthropic_count_tokens";

/** How an API writes the answers it refuses. */
export interface ErrorDialect {
  /** The response header that carries the request's id. */
  readonly requestIdHeader: string;
  /** The JSON body of an error answer; errors from code the APIs share come as OpenAiError. */
  errorBody(error: ProviderError, requestId: string): string;
}

/** What every API's parsed request says, whatever else it says. */
export interface ModelCall {
  readonly model: string;
  readonly stream: boolean;
}

export interface AnswerContext {
  readonly apiKey: string;
  /** `x-fake-cached-tokens`, which overrides the prompt-cache model. */
  readonly cachedTokens: number | undefined;
  /** `x-fake-usage`: members that replace the answer's usage object's, whatever their values. */
  readonly usage: Readonly<Record<string, unknown>> | undefined;
  /** `performance.now()` when the request arrived. */
  readonly startedAt: number;
}

/** A 200: one JSON body, or a stream's events one string each, so a fault can fall between any two. */
export type Answer =
  | { readonly headers: Readonly<Record<string, string>>; readonly body: string; readonly events?: undefined }
  | { readonly headers: Readonly<Record<string, string>>; readonly events: readonly string[] };

/**
 * One API of the fake provider. The server runs every call alike: controls, latency, the key,
 * the body, injected faults, then `answer`, then streaming with its pauses, delays and breaks.
 * An API decides only what is its own: its wire shapes, its errors and its metering.
 */
export interface ModelApi<Call extends ModelCall = ModelCall> extends ErrorDialect {
  readonly name: ApiName;
  /** The key the request authenticates with; throws this API's 401 when it is missing or refused. */
  authenticate(request: FakeRequest): string;
  /** Reads a valid request, or throws this API's 400 naming what is wrong. */
  parse(request: FakeRequest): Call;
  /** This API's error for `x-fake-fail: <status>`. */
  injectedFailure(status: number, call: Call): ProviderError;
  /** Plans the reply, takes it from the key's rate limits, and writes it; throws a refusal. */
  answer(call: Call, context: AnswerContext): Answer;
  /** The event a stream ends with when `x-fake-fail: error-after:N` breaks it after `sequence` events. */
  streamError(apiKey: string, sequence: number): string;
  /** The rate-limit headers every answer carries once the key is known. */
  rateLimitHeaders(state: RateLimitState): Record<string, string>;
}

/** What the APIs of one fake provider share. */
export interface ApiDeps {
  readonly limiter: RateLimiter;
  readonly promptCache: PromptCache;
  readonly clock: Clock;
}
