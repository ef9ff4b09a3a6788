import { type ConversationShape, textOf } from "../conversation.js";
import { isRecord } from "../json.js";
import { readChatUsage } from "./usage.js";

const role = (message: unknown): string =>
  isRecord(message) && typeof message.role === "string" ? message.role : "";

/** A Chat Completions conversation: `messages`, system and developer prompts among them. */
export const chatConversation: ConversationShape = {
  messagesOf: (body) => (Array.isArray(body.messages) ? body.messages : undefined),
  withMessages: (body, messages) => ({ ...body, messages }),
  pinned: (message) => role(message) === "system" || role(message) === "developer",
  // A tool's result answers the assistant message before it.
  canStart: (message) => role(message) !== "tool" && role(message) !== "function",
  transcriptLine(message) {
    if (!isRecord(message)) return JSON.stringify(message);
    const calls = Array.isArray(message.tool_calls)
      ? ` [tool calls: ${JSON.stringify(message.tool_calls)}]`
      : "";
    const id = typeof message.tool_call_id === "string" ? ` (${message.tool_call_id})` : "";
    return `${role(message)}${id}: ${textOf(message.content)}${calls}`;
  },
  summaryMessage: (summary) => ({
    role: "user",
    content: `[Summary of the earlier conversation]\n${summary}`,
  }),
  summaryRequest: (model, instructions, transcript, maxTokens) => ({
    model,
    max_tokens: maxTokens,
    messages: [
      { role: "system", content: instructions },
      { role: "user", content: transcript },
    ],
  }),
  summaryOf(json) {
    if (!isRecord(json) || !Array.isArray(json.choices)) return undefined;
    const message = isRecord(json.choices[0]) ? json.choices[0].message : undefined;
    const text = isRecord(message) && typeof message.content === "string" ? message.content : undefined;
    return text === undefined || text.trim() === "" ? undefined : { text, usage: readChatUsage(json.usage) };
  },
};
