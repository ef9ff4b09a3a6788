import { sseEvents } from "./json.js";

/** What an answer said, whichever API shape and whether streamed: its text and its tool calls. */
export interface AssembledAnswer {
  /** The model that answered, as the provider named it ("" when it did not). */
  readonly model: string;
  readonly text: string;
  readonly toolCalls: readonly { readonly name: string; readonly arguments: string }[];
  readonly finishReason: string;
  readonly inputTokens: number;
  readonly outputTokens: number;
}

type Json = Record<string, unknown>;
const obj = (value: unknown): Json => (typeof value === "object" && value !== null ? (value as Json) : {});
const arr = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
const str = (value: unknown): string => (typeof value === "string" ? value : "");
const num = (value: unknown): number => (typeof value === "number" && Number.isFinite(value) ? value : 0);
/** The most tool calls or content blocks one answer is put together from; an index past it is a provider's nonsense. */
const MAX_INDEX = 1_024;
/** A provider's index of a tool call or block, or undefined when it is none a real answer has. */
const indexOf = (value: unknown): number | undefined => {
  const index = num(value);
  return Number.isInteger(index) && index >= 0 && index < MAX_INDEX ? index : undefined;
};

/**
 * An answer as stored (a body, or a stream's events) put together: OpenAI Chat
 * Completions, OpenAI Responses and Anthropic Messages, whole or streamed. What it cannot
 * read is left out, never guessed.
 */
export function assembleAnswer(api: string, text: string, streamed: boolean): AssembledAnswer {
  if (!streamed) {
    let body: Json;
    try {
      body = obj(JSON.parse(text));
    } catch {
      return { model: "", text, toolCalls: [], finishReason: "", inputTokens: 0, outputTokens: 0 };
    }
    if (api === "anthropic_messages") return messagesBody(body);
    if (api === "openai_responses") return responsesBody(body);
    return chatBody(body);
  }
  const events = sseEvents(text);
  if (api === "anthropic_messages") return messagesStream(events);
  if (api === "openai_responses") {
    // The completed event carries the whole response.
    const done = events.find((e) => obj(e.data).type === "response.completed");
    if (done !== undefined) return responsesBody(obj(obj(done.data).response));
    return { model: "", text: "", toolCalls: [], finishReason: "", inputTokens: 0, outputTokens: 0 };
  }
  return chatStream(events);
}

function chatBody(body: Json): AssembledAnswer {
  const choice = obj(arr(body.choices)[0]);
  const message = obj(choice.message);
  const usage = obj(body.usage);
  return {
    model: str(body.model),
    text: str(message.content),
    toolCalls: arr(message.tool_calls).map((c) => {
      const fn = obj(obj(c).function);
      return { name: str(fn.name), arguments: str(fn.arguments) };
    }),
    finishReason: str(choice.finish_reason),
    inputTokens: num(usage.prompt_tokens),
    outputTokens: num(usage.completion_tokens),
  };
}

function chatStream(events: { data: unknown }[]): AssembledAnswer {
  let model = "";
  let text = "";
  let finishReason = "";
  let inputTokens = 0;
  let outputTokens = 0;
  const calls = new Map<number, { name: string; arguments: string }>();
  for (const { data } of events) {
    const chunk = obj(data);
    model ||= str(chunk.model);
    const usage = obj(chunk.usage);
    inputTokens ||= num(usage.prompt_tokens);
    outputTokens ||= num(usage.completion_tokens);
    const choice = obj(arr(chunk.choices)[0]);
    finishReason ||= str(choice.finish_reason);
    const delta = obj(choice.delta);
    text += str(delta.content);
    for (const call of arr(delta.tool_calls)) {
      const c = obj(call);
      const index = indexOf(c.index);
      if (index === undefined) continue;
      const fn = obj(c.function);
      const found = calls.get(index) ?? { name: "", arguments: "" };
      found.name += str(fn.name);
      found.arguments += str(fn.arguments);
      calls.set(index, found);
    }
  }
  const toolCalls = [...calls.entries()].sort(([a], [b]) => a - b).map(([, call]) => call);
  return { model, text, toolCalls, finishReason, inputTokens, outputTokens };
}

function responsesBody(body: Json): AssembledAnswer {
  const usage = obj(body.usage);
  let text = "";
  const toolCalls: { name: string; arguments: string }[] = [];
  for (const item of arr(body.output)) {
    const o = obj(item);
    if (o.type === "message") for (const part of arr(o.content)) text += str(obj(part).text);
    else if (o.type === "function_call") toolCalls.push({ name: str(o.name), arguments: str(o.arguments) });
  }
  return {
    model: str(body.model),
    text,
    toolCalls,
    finishReason: str(body.status),
    inputTokens: num(usage.input_tokens),
    outputTokens: num(usage.output_tokens),
  };
}

function messagesBody(body: Json): AssembledAnswer {
  const usage = obj(body.usage);
  let text = "";
  const toolCalls: { name: string; arguments: string }[] = [];
  for (const block of arr(body.content)) {
    const b = obj(block);
    if (b.type === "text") text += str(b.text);
    else if (b.type === "tool_use")
      toolCalls.push({ name: str(b.name), arguments: JSON.stringify(b.input ?? {}) });
  }
  return {
    model: str(body.model),
    text,
    toolCalls,
    finishReason: str(body.stop_reason),
    inputTokens: num(usage.input_tokens),
    outputTokens: num(usage.output_tokens),
  };
}

function messagesStream(events: { data: unknown }[]): AssembledAnswer {
  let model = "";
  let text = "";
  let finishReason = "";
  let inputTokens = 0;
  let outputTokens = 0;
  const blocks = new Map<number, { kind: string; name: string; json: string }>();
  for (const { data } of events) {
    const e = obj(data);
    if (e.type === "message_start") {
      const message = obj(e.message);
      model = str(message.model);
      inputTokens = num(obj(message.usage).input_tokens);
    } else if (e.type === "content_block_start") {
      const block = obj(e.content_block);
      const index = indexOf(e.index);
      if (index !== undefined) blocks.set(index, { kind: str(block.type), name: str(block.name), json: "" });
      text += str(block.text);
    } else if (e.type === "content_block_delta") {
      const delta = obj(e.delta);
      if (delta.type === "text_delta") text += str(delta.text);
      else if (delta.type === "input_json_delta") {
        const index = indexOf(e.index);
        const block = index === undefined ? undefined : blocks.get(index);
        if (block !== undefined) block.json += str(delta.partial_json);
      }
    } else if (e.type === "message_delta") {
      finishReason = str(obj(e.delta).stop_reason) || finishReason;
      outputTokens = num(obj(e.usage).output_tokens) || outputTokens;
    }
  }
  return {
    model,
    text,
    toolCalls: [...blocks.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, b]) => b)
      .filter((b) => b.kind === "tool_use")
      .map((b) => ({ name: b.name, arguments: b.json === "" ? "{}" : b.json })),
    finishReason,
    inputTokens,
    outputTokens,
  };
}
