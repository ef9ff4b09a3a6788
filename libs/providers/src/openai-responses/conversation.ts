import { type ConversationShape, textOf } from "../conversation.js";
import { isRecord } from "../json.js";
import { readResponsesUsage } from "./usage.js";

const OUTPUTS = new Set(["function_call_output", "custom_tool_call_output", "computer_call_output"]);

/**
 * A Responses conversation: `input` as a list of items (a string input, or one continued
 * with previous_response_id, keeps its history at the provider: nothing to compact here).
 */
export const responsesConversation: ConversationShape = {
  messagesOf: (body) => (Array.isArray(body.input) ? body.input : undefined),
  withMessages: (body, input) => ({ ...body, input }),
  pinned: (item) => isRecord(item) && (item.role === "system" || item.role === "developer"),
  canStart: (item) => !(isRecord(item) && typeof item.type === "string" && OUTPUTS.has(item.type)),
  transcriptLine(item) {
    if (!isRecord(item)) return JSON.stringify(item);
    if (typeof item.role === "string") return `${item.role}: ${textOf(item.content)}`;
    return `${String(item.type)}: ${JSON.stringify(item)}`;
  },
  summaryMessage: (summary) => ({
    role: "user",
    content: `[Summary of the earlier conversation]\n${summary}`,
  }),
  summaryRequest: (model, instructions, transcript, maxTokens) => ({
    model,
    instructions,
    input: transcript,
    max_output_tokens: maxTokens,
    store: false,
  }),
  summaryOf(json) {
    if (!isRecord(json) || !Array.isArray(json.output)) return undefined;
    const texts: string[] = [];
    for (const item of json.output) {
      if (!isRecord(item) || !Array.isArray(item.content)) continue;
      for (const part of item.content) {
        if (isRecord(part) && part.type === "output_text" && typeof part.text === "string")
          texts.push(part.text);
      }
    }
    const text = texts.join("\n");
    return text.trim() === "" ? undefined : { text, usage: readResponsesUsage(json.usage) };
  },
};
