import { parseDirectives } from "./directives.js";
import { digest, stableJson } from "./hash.js";
import type { ChatRequest } from "./request.js";
import { contentText, estimateTokens } from "./tokens.js";

export type FinishReason = "stop" | "length" | "tool_calls";

export interface ToolCall {
  readonly id: string;
  readonly type: "function";
  readonly function: { readonly name: string; readonly arguments: string };
}

/** What the fake answers, decided from the request alone. */
export interface Reply {
  /** Null when the reply is tool calls. */
  readonly content: string | null;
  readonly toolCalls: readonly ToolCall[];
  readonly finishReason: FinishReason;
  readonly completionTokens: number;
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

const QUOTED_CHARS = 200;

/** `chatcmpl-…`, the same for the same body whatever the order of its keys. */
export function completionId(body: unknown): string {
  return `chatcmpl-${digest(stableJson(body)).slice(0, 29)}`;
}

export function systemFingerprint(model: string): string {
  return `fp_${digest(model).slice(0, 10)}`;
}

export function planReply(request: ChatRequest, seed: string): Reply {
  const last = request.messages.at(-1);
  if (last?.role === "tool") {
    return textReply(`Fake reply to tool result: ${clip(contentText(last.content), QUOTED_CHARS)}`, request);
  }

  const lastUser = request.messages.findLast((message) => message.role === "user");
  const userText = contentText(lastUser?.content);
  const calls = parseDirectives(userText).filter((call) => request.callableTools.has(call.name));
  if (calls.length === 0) return textReply(`Fake reply to: ${clip(userText, QUOTED_CHARS)}`, request);

  // Scripted calls are never truncated by max_tokens: a test that asks for a call wants the call.
  const toolCalls = calls.map(
    (call, index): ToolCall => ({
      id: `call_${digest(seed, String(index)).slice(0, 24)}`,
      type: "function",
      function: { name: call.name, arguments: JSON.stringify(call.args) },
    }),
  );
  const completionTokens = toolCalls.reduce(
    (sum, call) => sum + estimateTokens(call.function.name + call.function.arguments),
    0,
  );
  return { content: null, toolCalls, finishReason: "tool_calls", completionTokens };
}

function textReply(text: string, request: ChatRequest): Reply {
  const limit = request.maxTokens;
  const truncated = limit !== undefined && estimateTokens(text) > limit;
  const content = truncated ? clip(text, limit * 4) : text;
  return {
    content,
    toolCalls: [],
    finishReason: truncated ? "length" : "stop",
    completionTokens: estimateTokens(content),
  };
}

/** The first `length` UTF-16 units, without splitting a surrogate pair. */
function clip(text: string, length: number): string {
  if (text.length <= length) return text;
  const code = text.charCodeAt(length - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? length - 1 : length);
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
      ? { role: "assistant", content: null, tool_calls: reply.toolCalls, refusal: null, annotations: [] }
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
  const deltas: Array<{ delta: Record<string, unknown>; finish: FinishReason | null }> = [];

  if (reply.content === null) {
    reply.toolCalls.forEach((call, index) => {
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
  const events = deltas.map(({ delta, finish }) =>
    sse({
      id: head.id,
      object: "chat.completion.chunk",
      created: head.created,
      model: head.model,
      service_tier: "default",
      system_fingerprint: head.system_fingerprint,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      ...usageField,
    }),
  );
  if (includeUsage) {
    events.push(
      sse({
        id: head.id,
        object: "chat.completion.chunk",
        created: head.created,
        model: head.model,
        service_tier: "default",
        system_fingerprint: head.system_fingerprint,
        choices: [],
        usage,
      }),
    );
  }
  events.push("data: [DONE]\n\n");
  return events;
}

function sse(chunk: unknown): string {
  return `data: ${JSON.stringify(chunk)}\n\n`;
}

/** Each word with the whitespace after it; joined back they give the text unchanged. */
export function words(text: string): string[] {
  return text.match(/^\s+|\S+\s*/g) ?? [];
}

const FRAGMENT_CHARS = 8;

function fragments(text: string): string[] {
  const pieces: string[] = [];
  for (let start = 0; start < text.length; start += FRAGMENT_CHARS) {
    pieces.push(text.slice(start, start + FRAGMENT_CHARS));
  }
  return pieces;
}
