import { randomBytes } from "node:crypto";
import { base62 } from "../hash.js";
import { type FinishReason, fragments, type PlannedCall, type Reply, words } from "../reply.js";
import { sse } from "../sse.js";

/** Every field `@anthropic-ai/sdk`'s `Usage` type requires, the ones that do not apply null. */
export interface AnthropicUsage {
  /** Prompt tokens neither read from the cache nor written to it. */
  readonly input_tokens: number;
  readonly cache_creation_input_tokens: number;
  readonly cache_read_input_tokens: number;
  readonly cache_creation: {
    readonly ephemeral_5m_input_tokens: number;
    readonly ephemeral_1h_input_tokens: number;
  };
  readonly output_tokens: number;
  readonly output_tokens_details: null;
  readonly server_tool_use: null;
  readonly service_tier: "standard";
  readonly inference_geo: null;
  readonly speed: "standard";
}

/** What the fake decided about one message, before it is written either way. */
export interface MessagePlan {
  readonly id: string;
  readonly model: string;
  readonly reply: Reply;
  readonly usage: AnthropicUsage;
}

/** `msg_01` and 22 base-62 characters, as Anthropic's ids look. */
export function messageId(): string {
  return `msg_01${base62(randomBytes(22).toString("hex"), 22)}`;
}

export interface PromptUse {
  /** The whole prompt. */
  readonly tokens: number;
  readonly cacheRead: number;
  readonly cacheWritten: number;
  readonly cacheTtl: "5m" | "1h";
}

/** Anthropic's usage: `input_tokens` leaves out what was read from or written to the cache. */
export function usageOf(prompt: PromptUse, outputTokens: number): AnthropicUsage {
  const { tokens, cacheRead, cacheWritten, cacheTtl } = prompt;
  return {
    input_tokens: tokens - cacheRead - cacheWritten,
    cache_creation_input_tokens: cacheWritten,
    cache_read_input_tokens: cacheRead,
    cache_creation: {
      ephemeral_5m_input_tokens: cacheTtl === "5m" ? cacheWritten : 0,
      ephemeral_1h_input_tokens: cacheTtl === "1h" ? cacheWritten : 0,
    },
    output_tokens: outputTokens,
    output_tokens_details: null,
    server_tool_use: null,
    service_tier: "standard",
    inference_geo: null,
    speed: "standard",
  };
}

const STOP_REASONS: Readonly<Record<FinishReason, string>> = {
  stop: "end_turn",
  length: "max_tokens",
  tool_calls: "tool_use",
};

function toolUseId(call: PlannedCall): string {
  return `toolu_01${base62(call.seed, 22)}`;
}

function textBlock(text: string): Record<string, unknown> {
  return { type: "text", text, citations: null };
}

function toolUseBlock(call: PlannedCall, input: unknown): Record<string, unknown> {
  return { type: "tool_use", id: toolUseId(call), name: call.name, input, caller: { type: "direct" } };
}

/** The content blocks: one text block, or one `tool_use` block per call. */
function contentOf(reply: Reply): Array<Record<string, unknown>> {
  if (reply.content !== null) return [textBlock(reply.content)];
  return reply.toolCalls.map((call) => toolUseBlock(call, JSON.parse(call.arguments)));
}

/** The message; unfinished, as a stream's message_start gives it. */
function messageObject(plan: MessagePlan, finished: boolean): Record<string, unknown> {
  return {
    id: plan.id,
    type: "message",
    role: "assistant",
    model: plan.model,
    content: finished ? contentOf(plan.reply) : [],
    stop_reason: finished ? STOP_REASONS[plan.reply.finishReason] : null,
    stop_sequence: null,
    stop_details: null,
    container: null,
    diagnostics: null,
    // A stream opens reporting the prompt and its first output token.
    usage: finished ? plan.usage : { ...plan.usage, output_tokens: 1 },
  };
}

/** A `message` object, as Anthropic sends it. */
export function messageBody(plan: MessagePlan): string {
  return JSON.stringify(messageObject(plan, true));
}

/**
 * The server-sent events of a streamed message, one string per event: message_start, each
 * content block started, filled by deltas and stopped (a ping after the first start), then
 * message_delta with the stop reason and the output tokens, and message_stop.
 */
export function messageEvents(plan: MessagePlan): string[] {
  const events: string[] = [];
  const emit = (type: string, fields: Record<string, unknown> = {}): void => {
    events.push(sse({ type, ...fields }, type));
  };

  emit("message_start", { message: messageObject(plan, false) });
  const { content, toolCalls } = plan.reply;
  if (content !== null) {
    emit("content_block_start", { index: 0, content_block: textBlock("") });
    emit("ping");
    for (const word of words(content)) {
      emit("content_block_delta", { index: 0, delta: { type: "text_delta", text: word } });
    }
    emit("content_block_stop", { index: 0 });
  }
  toolCalls.forEach((call, index) => {
    emit("content_block_start", { index, content_block: toolUseBlock(call, {}) });
    if (index === 0) emit("ping");
    // Anthropic opens a tool's input with an empty fragment.
    for (const fragment of ["", ...fragments(call.arguments)]) {
      emit("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: fragment } });
    }
    emit("content_block_stop", { index });
  });
  // The usage is cumulative: the prompt's counts again, and the whole output.
  const { input_tokens, cache_creation_input_tokens, cache_read_input_tokens, output_tokens } = plan.usage;
  emit("message_delta", {
    delta: {
      stop_reason: STOP_REASONS[plan.reply.finishReason],
      stop_sequence: null,
      stop_details: null,
      container: null,
    },
    usage: { input_tokens, cache_creation_input_tokens, cache_read_input_tokens, output_tokens },
  });
  emit("message_stop");
  return events;
}
