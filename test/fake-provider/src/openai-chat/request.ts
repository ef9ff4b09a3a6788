import { invalidRequest, invalidType, missingParameter } from "../errors.js";
import { isRecord } from "../json.js";
import { optionalBoolean, tokenLimit } from "../openai.js";
import type { ChatMessage, Conversation } from "../reply.js";

/**
 * What the fake needs from a valid Chat Completions request body. `messages` are kept as sent,
 * `maxTokens` is `max_completion_tokens` or the older `max_tokens`, and no tool is callable
 * when `tool_choice` is "none".
 */
export interface ChatRequest extends Conversation {
  readonly model: string;
  readonly stream: boolean;
  readonly includeUsage: boolean;
  /** `tools` as sent, counted into the prompt. */
  readonly tools: readonly unknown[];
}

/** Checks a parsed body the way OpenAI does, naming the first field that is wrong. */
export function toChatRequest(body: unknown): ChatRequest {
  if (!isRecord(body)) throw invalidRequest("The request body must be a JSON object.", null);

  const { model, messages } = body;
  if (model === undefined) throw invalidRequest("you must provide a model parameter", "model");
  if (typeof model !== "string") throw invalidType("model", "a string", model);
  if (messages === undefined) throw missingParameter("messages");
  if (!Array.isArray(messages)) throw invalidType("messages", "an array", messages);
  if (messages.length === 0) {
    throw invalidRequest(
      "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
      "messages",
      "empty_array",
    );
  }
  messages.forEach((message: unknown, index) => {
    if (!isRecord(message)) throw invalidType(`messages[${index}]`, "an object", message);
    const { role } = message;
    if (role === undefined) throw missingParameter(`messages[${index}].role`);
    if (typeof role !== "string") throw invalidType(`messages[${index}].role`, "a string", role);
  });

  const stream = optionalBoolean(body, "stream") ?? false;
  const streamOptions = body.stream_options;
  const includeUsage = isRecord(streamOptions) && streamOptions.include_usage === true;
  const maxTokens = tokenLimit(body, "max_completion_tokens") ?? tokenLimit(body, "max_tokens");

  const tools = body.tools ?? [];
  if (!Array.isArray(tools)) throw invalidType("tools", "an array", tools);
  const callableTools = new Set<string>();
  if (body.tool_choice !== "none") {
    for (const tool of tools) {
      if (isRecord(tool) && isRecord(tool.function) && typeof tool.function.name === "string") {
        callableTools.add(tool.function.name);
      }
    }
  }

  return {
    model,
    messages: messages as ChatMessage[],
    stream,
    includeUsage,
    maxTokens,
    tools,
    callableTools,
  };
}
