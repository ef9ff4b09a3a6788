import { AnthropicError, anthropicInvalid } from "../errors.js";
import { isRecord } from "../json.js";
import type { PromptSegment } from "../prompt-cache.js";
import type { ChatMessage, Conversation } from "../reply.js";
import { estimateTokens, TOKENS_PER_MESSAGE, TOKENS_PER_PROMPT } from "../tokens.js";

/**
 * What the fake needs from a valid Messages request body. Its `messages` are `system` and
 * `messages` read into Chat Completions' form (tool results become role "tool"), for the model;
 * `segments` are the prompt block by block, for the token count and the prompt cache.
 */
export interface MessagesRequest extends Conversation {
  readonly model: string;
  readonly stream: boolean;
  /** Tools, then system blocks, then message blocks: the order in which Anthropic caches a prompt. */
  readonly segments: readonly PromptSegment[];
  /** How long the last `cache_control` breakpoint asks the cache to keep the prompt. */
  readonly cacheTtl: "5m" | "1h";
}

export interface ReadOptions {
  /** For `count_tokens`, which takes the same body without `max_tokens`, and never streams. */
  readonly countOnly: boolean;
}

/** Checks a parsed body the way Anthropic does, naming the first field that is wrong. */
export function toMessagesRequest(body: unknown, { countOnly }: ReadOptions): MessagesRequest {
  if (!isRecord(body)) throw new AnthropicError(400, "The request body must be a JSON object.");

  const { model, max_tokens: maxTokens, messages, system } = body;
  if (model === undefined) throw anthropicInvalid("model", "Field required");
  if (typeof model !== "string") throw anthropicInvalid("model", "Input should be a valid string");
  if (maxTokens === undefined) {
    if (!countOnly) throw anthropicInvalid("max_tokens", "Field required");
  } else if (typeof maxTokens !== "number" || !Number.isInteger(maxTokens)) {
    throw anthropicInvalid("max_tokens", "Input should be a valid integer");
  } else if (maxTokens < 1) {
    throw anthropicInvalid("max_tokens", "Input should be greater than or equal to 1");
  }
  if (messages === undefined) throw anthropicInvalid("messages", "Field required");
  if (!Array.isArray(messages)) throw anthropicInvalid("messages", "Input should be a valid list");
  const stream = body.stream ?? false;
  if (typeof stream !== "boolean") throw anthropicInvalid("stream", "Input should be a valid boolean");
  const metadata = body.metadata ?? {};
  if (!isRecord(metadata)) throw anthropicInvalid("metadata", "Input should be a valid dictionary");
  if (metadata.user_id != null && typeof metadata.user_id !== "string") {
    throw anthropicInvalid("metadata.user_id", "Input should be a valid string");
  }

  const prompt = new Prompt();
  const chat: ChatMessage[] = [];
  const tools = readTools(body.tools, prompt);
  const systemText = readSystem(system, prompt);
  if (systemText !== "") chat.push({ role: "system", content: systemText });
  for (const [index, message] of messages.entries()) chat.push(...readMessage(message, index, prompt));

  return {
    model,
    stream: stream && !countOnly,
    messages: chat,
    callableTools: callable(tools, body.tool_choice),
    maxTokens,
    segments: prompt.segments,
    cacheTtl: prompt.cacheTtl,
  };
}

/** The prompt's segments as they are read, and where `cache_control` marks them. */
class Prompt {
  readonly segments: PromptSegment[] = [{ value: "prompt", tokens: TOKENS_PER_PROMPT, breakpoint: false }];
  cacheTtl: "5m" | "1h" = "5m";

  /** `value` identifies the segment in the cache; `block` is the block that may carry `cache_control`. */
  add(value: unknown, tokens: number, block: unknown): void {
    const mark = isRecord(block) ? block.cache_control : undefined;
    const breakpoint = isRecord(mark);
    if (breakpoint) this.cacheTtl = mark.ttl === "1h" ? "1h" : "5m";
    this.segments.push({ value, tokens, breakpoint });
  }
}

/** Custom tools, each one a segment of the prompt; returns the names of those the model may call. */
function readTools(tools: unknown, prompt: Prompt): string[] {
  if (tools === undefined) return [];
  if (!Array.isArray(tools)) throw anthropicInvalid("tools", "Input should be a valid list");
  const names: string[] = [];
  tools.forEach((tool: unknown, index) => {
    const at = `tools.${index}`;
    if (!isRecord(tool)) throw anthropicInvalid(at, "Input should be a valid dictionary");
    if (typeof tool.name !== "string") throw anthropicInvalid(`${at}.name`, "Field required");
    // Anthropic's server tools (web search, code execution…) carry a versioned type and no schema.
    const custom = tool.type === undefined || tool.type === "custom";
    if (custom) {
      if (!isRecord(tool.input_schema)) throw anthropicInvalid(`${at}.input_schema`, "Field required");
      names.push(tool.name);
    }
    prompt.add({ tool }, estimateTokens(JSON.stringify(tool)), tool);
  });
  return names;
}

function callable(tools: readonly string[], choice: unknown): ReadonlySet<string> {
  if (!isRecord(choice)) return new Set(tools);
  if (choice.type === "none") return new Set();
  if (choice.type === "tool") return new Set(tools.filter((name) => name === choice.name));
  return new Set(tools);
}

/** The system prompt's text; a string, or text blocks that may carry `cache_control`. */
function readSystem(system: unknown, prompt: Prompt): string {
  if (system === undefined || system === null) return "";
  if (typeof system === "string") {
    prompt.add({ system }, estimateTokens(system), undefined);
    return system;
  }
  if (!Array.isArray(system)) throw anthropicInvalid("system", "Input should be a valid string");
  return system
    .map((block: unknown, index) => {
      const at = `system.${index}`;
      if (!isRecord(block)) throw anthropicInvalid(at, "Input should be a valid dictionary");
      if (block.type !== "text" || typeof block.text !== "string") {
        throw anthropicInvalid(`${at}.text`, "Field required");
      }
      prompt.add({ system: block }, estimateTokens(block.text), block);
      return block.text;
    })
    .join("\n");
}

/**
 * One message as chat turns: its tool results as role "tool", then its text (and on an
 * assistant turn its tool uses) as one turn of its role. Each content block is a segment.
 */
function readMessage(message: unknown, index: number, prompt: Prompt): ChatMessage[] {
  const at = `messages.${index}`;
  if (!isRecord(message)) throw anthropicInvalid(at, "Input should be a valid dictionary");
  const { role, content } = message;
  if (role !== "user" && role !== "assistant") {
    throw anthropicInvalid(`${at}.role`, "Input should be 'user' or 'assistant'");
  }
  if (content === undefined) throw anthropicInvalid(`${at}.content`, "Field required");
  // The message's own overhead rides on its first block, so a cached prefix counts it.
  let overhead = TOKENS_PER_MESSAGE;
  const push = (block: unknown, tokens: number): void => {
    prompt.add({ message: index, role, block }, tokens + overhead, block);
    overhead = 0;
  };

  if (typeof content === "string") {
    push(content, estimateTokens(content));
    return [{ role, content }];
  }
  if (!Array.isArray(content)) throw anthropicInvalid(`${at}.content`, "Input should be a valid list");

  const turns: ChatMessage[] = [];
  const texts: string[] = [];
  const toolCalls: unknown[] = [];
  for (const [blockIndex, block] of (content as unknown[]).entries()) {
    const blockAt = `${at}.content.${blockIndex}`;
    if (!isRecord(block)) throw anthropicInvalid(blockAt, "Input should be a valid dictionary");
    if (typeof block.type !== "string") throw anthropicInvalid(`${blockAt}.type`, "Field required");
    switch (block.type) {
      case "text":
        if (typeof block.text !== "string") throw anthropicInvalid(`${blockAt}.text`, "Field required");
        texts.push(block.text);
        push(block, estimateTokens(block.text));
        break;
      case "tool_use": {
        const args = JSON.stringify(block.input ?? {});
        toolCalls.push({ id: block.id, type: "function", function: { name: block.name, arguments: args } });
        push(block, estimateTokens(String(block.name) + args));
        break;
      }
      case "tool_result": {
        const text = resultText(block.content);
        turns.push({ role: "tool", tool_call_id: block.tool_use_id, content: text });
        push(block, estimateTokens(text));
        break;
      }
      case "thinking":
        push(block, estimateTokens(typeof block.thinking === "string" ? block.thinking : ""));
        break;
      default:
        // Images and documents are kept out of the count, as the fake's chat count keeps images out.
        push(block, 0);
    }
  }
  if (texts.length > 0 || toolCalls.length > 0) {
    turns.push({
      role,
      content: texts.join("\n"),
      ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
    });
  }
  return turns;
}

function resultText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((block): block is { text: string } => isRecord(block) && typeof block.text === "string")
    .map((block) => block.text)
    .join("\n");
}
