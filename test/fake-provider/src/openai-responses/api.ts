import type { ApiDeps, ModelApi } from "../api.js";
import {
  generationFailed,
  injectedFailure,
  invalidJson,
  previousResponseNotFound,
  rateLimitExceeded,
} from "../errors.js";
import { OPENAI_DIALECT, openAiHeaders, openAiKey } from "../openai.js";
import { wholeBlocks } from "../prompt-cache.js";
import { rateLimitHeaders } from "../rate-limit.js";
import { planReply } from "../reply.js";
import { sse } from "../sse.js";
import { promptTokens } from "../tokens.js";
import type { ResponseMemory } from "./memory.js";
import { type ResponsesRequest, toResponsesRequest } from "./request.js";
import {
  type ResponsePlan,
  type ResponsesUsage,
  responseBody,
  responseEvents,
  responseId,
  usageOf,
} from "./response.js";

/** `POST /v1/responses`. */
export function openAiResponsesApi(
  { limiter, promptCache, clock }: ApiDeps,
  memory: ResponseMemory,
): ModelApi<ResponsesRequest> {
  return {
    ...OPENAI_DIALECT,
    name: "openai_responses",
    authenticate: openAiKey,
    parse(request) {
      if (request.body === undefined) throw invalidJson();
      return toResponsesRequest(request.body);
    },
    injectedFailure: (status, call) => injectedFailure(status, call.model),

    answer(call, { apiKey, cachedTokens, usage: reported, startedAt }) {
      const previous =
        call.previousResponseId === null ? undefined : memory.recall(apiKey, call.previousResponseId);
      if (call.previousResponseId !== null && previous === undefined) {
        throw previousResponseNotFound(call.previousResponseId);
      }
      const id = responseId();
      const reply = planReply(call, id);
      // The conversation so far is the previous response's prompt and output, then this input.
      const earlier = previous === undefined ? 0 : previous.inputTokens + previous.outputTokens;
      const prompt = earlier + promptTokens(call.messages, call.tools);
      const decision = limiter.admit(apiKey, { tokens: prompt + (call.maxTokens ?? reply.completionTokens) });
      if (!decision.allowed) throw rateLimitExceeded({ model: call.model, ...decision });

      // The previous response's prompt is a prefix of this one, and was just read: it is cached.
      const cached = Math.max(
        promptCache.serve(apiKey, call.messages, prompt),
        wholeBlocks(previous?.inputTokens ?? 0),
      );
      const usage = {
        ...usageOf(prompt, reply.completionTokens, Math.min(cachedTokens ?? cached, prompt)),
        ...reported,
      } as ResponsesUsage;
      if (call.store)
        memory.remember(id, { apiKey, inputTokens: prompt, outputTokens: reply.completionTokens });

      const plan: ResponsePlan = { id, createdAt: Math.floor(clock() / 1000), request: call, reply, usage };
      const headers = openAiHeaders(startedAt);
      return call.stream ? { headers, events: responseEvents(plan) } : { headers, body: responseBody(plan) };
    },

    // As OpenAI sends it, an `error` event whose `error` member the SDKs raise as an APIError.
    streamError: (apiKey, sequence) =>
      sse(
        { type: "error", sequence_number: sequence, error: generationFailed(apiKey).toJSON().error },
        "error",
      ),
    rateLimitHeaders,
  };
}
