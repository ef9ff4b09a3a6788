import { parseDirectives } from "./directives.js";
import { digest } from "./hash.js";
import { contentText, estimateTokens } from "./tokens.js";

/**
 * One turn of a conversation in Chat Completions' form, which every API's request is read into:
 * `content` a string or text parts, tool calls on assistant turns, tool results as role "tool".
 */
export interface ChatMessage {
  readonly role: string;
  readonly content?: unknown;
  readonly tool_calls?: unknown;
  readonly [field: string]: unknown;
}

/** What the fake model reads of a request, whichever API it came through. */
export interface Conversation {
  readonly messages: readonly ChatMessage[];
  /** Function tools the model may call: none when the request's tool choice says so. */
  readonly callableTools: ReadonlySet<string>;
  /** The request's cap on output tokens. */
  readonly maxTokens: number | undefined;
}

export type FinishReason = "stop" | "length" | "tool_calls";

/** A tool call the model makes; each API derives its own ids from `seed`. */
export interface PlannedCall {
  /** Hex, distinct for each call of each reply. */
  readonly seed: string;
  readonly name: string;
  /** The arguments as JSON text. */
  readonly arguments: string;
}

/** What the fake answers, decided from the conversation alone. */
export interface Reply {
  /** Null when the reply is tool calls. */
  readonly content: string | null;
  readonly toolCalls: readonly PlannedCall[];
  readonly finishReason: FinishReason;
  readonly completionTokens: number;
}

const QUOTED_CHARS = 200;

/**
 * Quotes the last user message, answers a tool result, or makes the calls that `[[call:…]]`
 * directives in the last user message script, when the request declares those tools.
 */
export function planReply(conversation: Conversation, seed: string): Reply {
  const last = conversation.messages.at(-1);
  if (last?.role === "tool") {
    return textReply(
      `Fake reply to tool result: ${clip(contentText(last.content), QUOTED_CHARS)}`,
      conversation,
    );
  }

  const lastUser = conversation.messages.findLast((message) => message.role === "user");
  const userText = contentText(lastUser?.content);
  const calls = parseDirectives(userText).filter((call) => conversation.callableTools.has(call.name));
  if (calls.length === 0) return textReply(`Fake reply to: ${clip(userText, QUOTED_CHARS)}`, conversation);

  // Scripted calls are never truncated by max_tokens: a test that asks for a call wants the call.
  const toolCalls = calls.map(
    (call, index): PlannedCall => ({
      seed: digest(seed, String(index)),
      name: call.name,
      arguments: JSON.stringify(call.args),
    }),
  );
  const completionTokens = toolCalls.reduce(
    (sum, call) => sum + estimateTokens(call.name + call.arguments),
    0,
  );
  return { content: null, toolCalls, finishReason: "tool_calls", completionTokens };
}

function textReply(text: string, conversation: Conversation): Reply {
  const limit = conversation.maxTokens;
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

/** Each word with the whitespace after it; joined back they give the text unchanged. */
export function words(text: string): string[] {
  return text.match(/^\s+|\S+\s*/g) ?? [];
}

const FRAGMENT_CHARS = 8;

/** Tool-call arguments cut into short pieces, as models stream them. */
export function fragments(text: string): string[] {
  const pieces: string[] = [];
  for (let start = 0; start < text.length; start += FRAGMENT_CHARS) {
    pieces.push(text.slice(start, start + FRAGMENT_CHARS));
  }
  return pieces;
}
