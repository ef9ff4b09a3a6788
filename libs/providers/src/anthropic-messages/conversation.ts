import { type ConversationShape, textOf } from "../conversation.js";
import { isRecord } from "../json.js";
import { readAnthropicUsage } from "./usage.js";

/** An Anthropic Messages conversation: `messages` (the system prompt is a field of its own). */
export const anthropicConversation: ConversationShape = {
  messagesOf: (body) => (Array.isArray(body.messages) ? body.messages : undefined),
  withMessages: (body, messages) => ({ ...body, messages }),
  pinned: () => false,
  // The kept part starts with a user turn that is not a tool's result (which answers the
  // assistant's tool_use before it).
  canStart(message) {
    if (!isRecord(message) || message.role !== "user") return false;
    return !(
      Array.isArray(message.content) && message.content.some((b) => isRecord(b) && b.type === "tool_result")
    );
  },
  transcriptLine: (message) =>
    isRecord(message) ? `${String(message.role)}: ${textOf(message.content)}` : JSON.stringify(message),
  summaryMessage: (summary) => ({
    role: "user",
    content: `[Summary of the earlier conversation]\n${summary}`,
  }),
  summaryRequest: (model, instructions, transcript, maxTokens) => ({
    model,
    max_tokens: maxTokens,
    system: instructions,
    messages: [{ role: "user", content: transcript }],
  }),
  summaryOf(json) {
    if (!isRecord(json) || !Array.isArray(json.content)) return undefined;
    const text = json.content
      .filter((b) => isRecord(b) && b.type === "text" && typeof b.text === "string")
      .map((b) => (b as { text: string }).text)
      .join("\n");
    return text.trim() === "" ? undefined : { text, usage: readAnthropicUsage(json.usage) };
  },
};
