import type { ApiDeps, ErrorDialect, ModelApi } from "../api.js";
import {
  ANTHROPIC_VERSIONS,
  anthropicErrorBody,
  anthropicInjectedFailure,
  anthropicInvalidJson,
  anthropicInvalidKey,
  anthropicMissingKey,
  anthropicOverloaded,
  anthropicRateLimited,
  invalidAnthropicVersion,
  missingAnthropicVersion,
} from "../errors.js";
import type { FakeRequest } from "../exchange.js";
import { anthropicRateLimitHeaders, type Clock } from "../rate-limit.js";
import { planReply } from "../reply.js";
import { sse } from "../sse.js";
import { type AnthropicUsage, messageBody, messageEvents, messageId, usageOf } from "./message.js";
import { type MessagesRequest, type ReadOptions, toMessagesRequest } from "./request.js";

const ANTHROPIC_DIALECT: ErrorDialect = {
  requestIdHeader: "request-id",
  errorBody: anthropicErrorBody,
};

/** `POST /v1/messages`. */
export function anthropicMessagesApi({ limiter, promptCache, clock }: ApiDeps): ModelApi<MessagesRequest> {
  return {
    ...anthropicApi(clock, { countOnly: false }),
    name: "anthropic_messages",

    answer(call, { apiKey, cachedTokens, usage: reported }) {
      const id = messageId();
      const reply = planReply(call, id);
      const tokens = promptTokens(call);
      // Anthropic meters input and output apart; tokens read from the cache do not count.
      const expected = promptCache.peekBreakpoints(apiKey, call.segments);
      const decision = limiter.admit(apiKey, {
        "input-tokens": tokens - expected.read,
        "output-tokens": call.maxTokens ?? reply.completionTokens,
      });
      if (!decision.allowed) throw anthropicRateLimited({ model: call.model, ...decision });

      const cache = promptCache.serveBreakpoints(apiKey, call.segments);
      const forced = cachedTokens === undefined ? undefined : Math.min(cachedTokens, tokens);
      const usage = usageOf(
        {
          tokens,
          cacheRead: forced ?? cache.read,
          cacheWritten: forced === undefined ? cache.written : 0,
          cacheTtl: call.cacheTtl,
        },
        reply.completionTokens,
      );
      const plan = { id, model: call.model, reply, usage: { ...usage, ...reported } as AnthropicUsage };
      return call.stream
        ? { headers: {}, events: messageEvents(plan) }
        : { headers: {}, body: messageBody(plan) };
    },
  };
}

/** `POST /v1/messages/count_tokens`: the prompt a Messages request would send, counted. */
export function anthropicCountTokensApi({ clock }: ApiDeps): ModelApi<MessagesRequest> {
  return {
    ...anthropicApi(clock, { countOnly: true }),
    name: "anthropic_count_tokens",
    answer: (call) => ({ headers: {}, body: JSON.stringify({ input_tokens: promptTokens(call) }) }),
  };
}

/** What Anthropic's two routes share: the key, the version header, the body, the errors. */
function anthropicApi(
  clock: Clock,
  options: ReadOptions,
): Omit<ModelApi<MessagesRequest>, "name" | "answer"> {
  return {
    ...ANTHROPIC_DIALECT,
    authenticate: anthropicKey,
    parse(request) {
      checkVersion(request);
      if (request.body === undefined) throw anthropicInvalidJson();
      return toMessagesRequest(request.body, options);
    },
    injectedFailure: (status, call) => anthropicInjectedFailure(status, call.model),
    // Anthropic ends a stream that fails midway with an `error` event, most often this one.
    streamError: () => sse(anthropicOverloaded().body(), "error"),
    rateLimitHeaders: (state) => anthropicRateLimitHeaders(state, clock()),
  };
}

/** `x-api-key` or the bearer token; keys starting `sk-bad` are refused, as a revoked key would be. */
function anthropicKey(request: FakeRequest): string {
  const { apiKey } = request;
  if (apiKey === undefined) throw anthropicMissingKey();
  if (apiKey.startsWith("sk-bad")) throw anthropicInvalidKey();
  return apiKey;
}

function checkVersion(request: FakeRequest): void {
  const header = request.headers["anthropic-version"];
  const version = Array.isArray(header) ? header.join(", ") : header;
  if (version === undefined || version === "") throw missingAnthropicVersion();
  if (!ANTHROPIC_VERSIONS.has(version)) throw invalidAnthropicVersion(version);
}

function promptTokens(call: MessagesRequest): number {
  return call.segments.reduce((sum, segment) => sum + segment.tokens, 0);
}
