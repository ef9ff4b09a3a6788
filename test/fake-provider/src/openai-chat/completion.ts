import { digest, stableJson } from "../hash.js";
import { fragments, type PlannedCall, type Reply, words } from "../reply.js";
import { sse } from "../sse.js";

/** A tool call as Chat Completions writes it. */
export interface ToolCall {
  readonly id: string;
  readonly type: "function";
  readonly function: { readonly name: string; readonly arguments: string };
}

export interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly total_tokens: number;
  readonly prompt_tokens_details: { readonly cached_tokens: number; readonly audio_tokens: number };
  readonly completion_tokens_details: {
    readonly reasoning_tokens: number;
    readonly audio_tokens: number;
    readonly accepted_prediction_tokens: number;
    readonly rejected_prediction_tokens: number;
  };
}

/** The fields a completion and each of its stream chunks share. */
export interface CompletionHead {
  readonly id: string;
  readonly created: number;
  readonly model: string;
  readonly system_fingerprint: string;
}

/** `chatcmpl-…`, the same for the same body whatever the order of its keys. */
export function completionId(body: unknown): string {
  return `chatcmpl-${digest(stableJson(body)).slice(0, 29)}`;
}

export function systemFingerprint(model: string): string {
  return `fp_${digest(model).slice(0, 10)}`;
}

export function toolCallOf(call: PlannedCall): ToolCall {
  return {
    id: `call_${call.seed.slice(0, 24)}`,
    type: "function",
    function: { name: call.name, arguments: call.arguments },
  };
}

export function usageOf(promptTokens: number, completionTokens: number, cachedTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

/** A `chat.completion` object, as OpenAI sends it. */
export function completionBody(head: CompletionHead, reply: Reply, usage: Usage): string {
  const message =
    reply.content === null
      ? {
          role: "assistant",
          content: null,
          tool_calls: reply.toolCalls.map(toolCallOf),
          refusal: null,
          annotations: [],
        }
      : { role: "assistant", content: reply.content, refusal: null, annotations: [] };
  return JSON.stringify({
    id: head.id,
    object: "chat.completion",
    created: head.created,
    model: head.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: reply.finishReason }],
    usage,
    service_tier: "default",
    system_fingerprint: head.system_fingerprint,
  });
}

/**
 * The server-sent events of a streamed completion, `[DONE]` included, one string per event so
 * the server can write (and pause, or break) between any two of them.
 */
export function streamEvents(
  head: CompletionHead,
  reply: Reply,
  usage: Usage,
  includeUsage: boolean,
): string[] {
  const deltas: Array<{ delta: Record<string, unknown>; finish: Reply["finishReason"] | null }> = [];

  if (reply.content === null) {
    reply.toolCalls.map(toolCallOf).forEach((call, index) => {
      const opening = {
        tool_calls: [
          { index, id: call.id, type: "function", function: { name: call.function.name, arguments: "" } },
        ],
      };
      deltas.push({
        delta: index === 0 ? { role: "assistant", content: null, ...opening, refusal: null } : opening,
        finish: null,
      });
      for (const fragment of fragments(call.function.arguments)) {
        deltas.push({ delta: { tool_calls: [{ index, function: { arguments: fragment } }] }, finish: null });
      }
    });
  } else {
    deltas.push({ delta: { role: "assistant", content: "", refusal: null }, finish: null });
    for (const word of words(reply.content)) deltas.push({ delta: { content: word }, finish: null });
  }
  deltas.push({ delta: {}, finish: reply.finishReason });

  // With include_usage, OpenAI puts `"usage": null` on every chunk and the usage on one more
  // chunk that has no choices.
  const usageField = includeUsage ? { usage: null } : {};
  const chunk = (fields: Record<string, unknown>): string =>
    sse({
      id: head.id,
      object: "chat.completion.chunk",
      created: head.created,
      model: head.model,
      service_tier: "default",
      system_fingerprint: head.system_fingerprint,
      ...fields,
    });
  const events = deltas.map(({ delta, finish }) =>
    chunk({ choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...usageField }),
  );
  if (includeUsage) events.push(chunk({ choices: [], usage }));
  events.push("data: [DONE]\n\n");
  return events;
}
