import { invalidRequest, invalidType, missingParameter } from "../errors.js";
import { isRecord } from "../json.js";
import { optionalBoolean, optionalString, tokenLimit } from "../openai.js";
import type { ChatMessage, Conversation } from "../reply.js";

/**
 * What the fake needs from a valid Responses request body. Its `messages` are `instructions` and
 * `input` read into Chat Completions' form, for the model and the token count; `maxTokens` is
 * `max_output_tokens`.
 */
export interface ResponsesRequest extends Conversation {
  readonly model: string;
  readonly stream: boolean;
  readonly instructions: string | null;
  /** `tools` as the response echoes them, counted into the prompt. */
  readonly tools: readonly unknown[];
  readonly previousResponseId: string | null;
  readonly store: boolean;
  /** The request's settings a response repeats, with OpenAI's defaults filled in. */
  readonly settings: Readonly<Record<string, unknown>>;
}

const ROLES = ["assistant", "system", "developer", "user"] as const;
// OpenAI refuses a smaller cap on this API.
const MIN_OUTPUT_TOKENS = 16;

/** Checks a parsed body the way OpenAI does, naming the first field that is wrong. */
export function toResponsesRequest(body: unknown): ResponsesRequest {
  if (!isRecord(body)) throw invalidRequest("The request body must be a JSON object.", null);

  const { model, input } = body;
  if (model === undefined) throw missingParameter("model");
  if (typeof model !== "string") throw invalidType("model", "a string", model);
  const instructions = optionalString(body, "instructions") ?? null;
  const previousResponseId = optionalString(body, "previous_response_id") ?? null;
  if (input === undefined && previousResponseId === null) throw missingParameter("input");

  const messages: ChatMessage[] = [];
  if (instructions !== null) messages.push({ role: "developer", content: instructions });
  if (typeof input === "string") {
    messages.push({ role: "user", content: input });
  } else if (Array.isArray(input)) {
    for (const [index, item] of input.entries()) messages.push(itemMessage(item, index));
  } else if (input !== undefined) {
    throw invalidType("input", "a string or an array", input);
  }

  const tools = body.tools ?? [];
  if (!Array.isArray(tools)) throw invalidType("tools", "an array", tools);
  const echoedTools = tools.map((tool: unknown, index) => echoTool(tool, index));
  const callableTools = new Set<string>();
  if (body.tool_choice !== "none") {
    for (const tool of echoedTools) if (tool.type === "function") callableTools.add(String(tool.name));
  }

  const metadata = body.metadata ?? null;
  if (metadata !== null && !isRecord(metadata)) throw invalidType("metadata", "an object", metadata);
  const maxTokens = tokenLimit(body, "max_output_tokens", MIN_OUTPUT_TOKENS);

  return {
    model,
    stream: optionalBoolean(body, "stream") ?? false,
    messages,
    callableTools,
    maxTokens,
    instructions,
    tools: echoedTools,
    previousResponseId,
    store: optionalBoolean(body, "store") ?? true,
    settings: {
      max_output_tokens: maxTokens ?? null,
      metadata: metadata ?? {},
      parallel_tool_calls: optionalBoolean(body, "parallel_tool_calls") ?? true,
      reasoning: body.reasoning ?? { effort: null, summary: null },
      temperature: body.temperature ?? 1,
      text: body.text ?? { format: { type: "text" }, verbosity: "medium" },
      tool_choice: body.tool_choice ?? "auto",
      top_p: body.top_p ?? 1,
      truncation: body.truncation ?? "disabled",
      user: body.user ?? null,
    },
  };
}

/** One input item as a chat turn: messages, function calls and their outputs; other items count as empty turns. */
function itemMessage(item: unknown, index: number): ChatMessage {
  const at = `input[${index}]`;
  if (!isRecord(item)) throw invalidType(at, "an object", item);
  const type = item.type ?? "message";
  if (type === "message") {
    const { role, content } = item;
    if (role === undefined) throw missingParameter(`${at}.role`);
    if (typeof role !== "string" || !(ROLES as readonly string[]).includes(role)) {
      throw invalidRequest(
        `Invalid value: '${String(role)}'. Supported values are: 'assistant', 'system', 'developer', and 'user'.`,
        `${at}.role`,
        "invalid_value",
      );
    }
    if (content === undefined) throw missingParameter(`${at}.content`);
    return { role, content: partsText(content, `${at}.content`) };
  }
  if (type === "function_call") {
    const name = requiredString(item, "name", at);
    const args = requiredString(item, "arguments", at);
    return {
      role: "assistant",
      content: null,
      tool_calls: [{ id: item.call_id, type: "function", function: { name, arguments: args } }],
    };
  }
  if (type === "function_call_output") {
    const callId = requiredString(item, "call_id", at);
    if (item.output === undefined) throw missingParameter(`${at}.output`);
    return { role: "tool", tool_call_id: callId, content: partsText(item.output, `${at}.output`) };
  }
  return { role: String(type), content: "" };
}

/** A string, or the text of an array of content parts (`input_text`, `output_text`, `refusal`). */
function partsText(content: unknown, at: string): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) throw invalidType(at, "a string or an array", content);
  const texts: string[] = [];
  for (const part of content) {
    if (!isRecord(part)) continue;
    if (typeof part.text === "string") texts.push(part.text);
    else if (typeof part.refusal === "string") texts.push(part.refusal);
  }
  return texts.join("\n");
}

/** A tool as a response repeats it: function tools with OpenAI's defaults filled in. */
function echoTool(tool: unknown, index: number): Record<string, unknown> {
  const at = `tools[${index}]`;
  if (!isRecord(tool)) throw invalidType(at, "an object", tool);
  if (tool.type === undefined) throw missingParameter(`${at}.type`);
  if (tool.type !== "function") return tool;
  const name = requiredString(tool, "name", at);
  return {
    type: "function",
    description: tool.description ?? null,
    name,
    parameters: tool.parameters ?? null,
    strict: tool.strict ?? true,
  };
}

function requiredString(record: Record<string, unknown>, field: string, at: string): string {
  const value = record[field];
  if (value === undefined) throw missingParameter(`${at}.${field}`);
  if (typeof value !== "string") throw invalidType(`${at}.${field}`, "a string", value);
  return value;
}
