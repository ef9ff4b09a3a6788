import { invalidRequest, invalidType, missingParameter } from "./errors.js";

/** One entry of `messages`, kept as sent: the fake reads only what it needs. */
export interface ChatMessage {
  readonly role: string;
  readonly content?: unknown;
  readonly tool_calls?: unknown;
  readonly [field: string]: unknown;
}

/** What the fake needs from a valid Chat Completions request body. */
export interface ChatRequest {
  readonly model: string;
  readonly messages: readonly ChatMessage[];
  readonly stream: boolean;
  readonly includeUsage: boolean;
  /** `max_completion_tokens`, or the older `max_tokens`. */
  readonly maxTokens: number | undefined;
  /** `tools` as sent, counted into the prompt. */
  readonly tools: readonly unknown[];
  /** Function tools the model may call; empty when `tool_choice` is "none". */
  readonly callableTools: ReadonlySet<string>;
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

function optionalBoolean(body: Record<string, unknown>, field: string): boolean | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "boolean") throw invalidType(field, "a boolean", value);
  return value;
}

function tokenLimit(body: Record<string, unknown>, field: string): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value)) throw invalidType(field, "an integer", value);
  if (value < 1) {
    throw invalidRequest(
      `Invalid '${field}': integer below minimum value. Expected a value >= 1, but got ${value} instead.`,
      field,
      "integer_below_min_value",
    );
  }
  return value;
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
