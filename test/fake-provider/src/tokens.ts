import { isRecord } from "./json.js";
import type { ChatMessage } from "./reply.js";

// A crude tokenizer on purpose: about four characters a token, like OpenAI's rule of thumb.
// What matters to tests is that the same text always gives the same count.
const CHARS_PER_TOKEN = 4;
export const TOKENS_PER_MESSAGE = 4;
export const TOKENS_PER_PROMPT = 2;

export function estimateTokens(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

/** The text of a message's `content`: a string, or the `text` parts of an array of parts. */
export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  const texts: string[] = [];
  for (const part of content) {
    if (isRecord(part) && part.type === "text" && typeof part.text === "string") texts.push(part.text);
  }
  return texts.join("\n");
}

export function messageTokens(message: ChatMessage): number {
  let chars = contentText(message.content).length;
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls) {
      if (!isRecord(call) || !isRecord(call.function)) continue;
      const { name, arguments: args } = call.function;
      chars += (typeof name === "string" ? name.length : 0) + (typeof args === "string" ? args.length : 0);
    }
  }
  return TOKENS_PER_MESSAGE + Math.ceil(chars / CHARS_PER_TOKEN);
}

/** Prompt tokens of a request; tool declarations count as their JSON text. */
export function promptTokens(messages: readonly ChatMessage[], tools: readonly unknown[] = []): number {
  let total = TOKENS_PER_PROMPT;
  for (const message of messages) total += messageTokens(message);
  if (tools.length > 0) total += estimateTokens(JSON.stringify(tools));
  return total;
}
