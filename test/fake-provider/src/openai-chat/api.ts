import type { ApiDeps, ModelApi } from "../api.js";
import { generationFailed, injectedFailure, invalidJson, rateLimitExceeded } from "../errors.js";
import { OPENAI_DIALECT, openAiHeaders, openAiKey } from "../openai.js";
import { rateLimitHeaders } from "../rate-limit.js";
import { planReply } from "../reply.js";
import { sse } from "../sse.js";
import { promptTokens } from "../tokens.js";
import {
  completionBody,
  completionId,
  streamEvents,
  systemFingerprint,
  type Usage,
  usageOf,
} from "./completion.js";
import { type ChatRequest, toChatRequest } from "./request.js";

interface ChatCall extends ChatRequest {
  readonly id: string;
}

/** `POST /v1/chat/completions`. */
export function openAiChatApi({ limiter, promptCache, clock }: ApiDeps): ModelApi<ChatCall> {
  return {
    ...OPENAI_DIALECT,
    name: "openai_chat_completions",
    authenticate: openAiKey,
    parse(request) {
      if (request.body === undefined) throw invalidJson();
      return { ...toChatRequest(request.body), id: completionId(request.body) };
    },
    injectedFailure: (status, call) => injectedFailure(status, call.model),

    answer(call, { apiKey, cachedTokens, usage: reported, startedAt }) {
      const reply = planReply(call, call.id);
      const prompt = promptTokens(call.messages, call.tools);
      const decision = limiter.admit(apiKey, { tokens: prompt + (call.maxTokens ?? reply.completionTokens) });
      if (!decision.allowed) throw rateLimitExceeded({ model: call.model, ...decision });

      const cached = promptCache.serve(apiKey, call.messages, prompt);
      const usage = {
        ...usageOf(prompt, reply.completionTokens, Math.min(cachedTokens ?? cached, prompt)),
        ...reported,
      } as Usage;
      const head = {
        id: call.id,
        created: Math.floor(clock() / 1000),
        model: call.model,
        system_fingerprint: systemFingerprint(call.model),
      };
      const headers = openAiHeaders(startedAt);
      return call.stream
        ? { headers, events: streamEvents(head, reply, usage, call.includeUsage) }
        : { headers, body: completionBody(head, reply, usage) };
    },

    // OpenAI ends a chat stream that fails midway with a bare `data: {"error": …}` event.
    streamError: (apiKey) => sse(generationFailed(apiKey)),
    rateLimitHeaders,
  };
}
