import { isRecord, nonEmptyString, parseObject, stringOr } from "../json.js";
import type { AnswerSummary, StreamMeter, StreamObservation, ToolCall } from "../shape.js";
import { eventType, type SseEvent } from "../sse.js";
import { NO_USAGE } from "../usage.js";
import { readAnthropicUsage } from "./usage.js";

/**
 * Reads a non-streamed Anthropic `message`. Tool calls are its `tool_use` blocks, the
 * ones the client runs; `server_tool_use` blocks are run by Anthropic and are not the
 * agent's to answer.
 */
export function summarizeAnthropicMessage(json: unknown): AnswerSummary {
  if (!isRecord(json)) {
    return {
      model: undefined,
      usage: NO_USAGE,
      finishReason: undefined,
      toolCalls: [],
      responseId: undefined,
    };
  }
  const toolCalls: ToolCall[] = [];
  if (Array.isArray(json.content)) {
    for (const block of json.content) {
      const call = toolUse(block);
      if (call !== undefined)
        toolCalls.push({ id: call.id, name: call.name, arguments: serialised(call.input) });
    }
  }
  return {
    model: nonEmptyString(json.model),
    usage: readAnthropicUsage(json.usage),
    finishReason: nonEmptyString(json.stop_reason),
    toolCalls,
    responseId: nonEmptyString(json.id),
  };
}

const PLAIN: StreamObservation = Object.freeze({ hidden: false, terminal: false });
const TERMINAL: StreamObservation = Object.freeze({ hidden: false, terminal: true });

interface StreamedToolUse {
  readonly id: string;
  readonly name: string;
  /** The `input` of `content_block_start`, used when no `input_json_delta` follows. */
  readonly input: unknown;
  partialJson: string;
}

/**
 * Meters a streamed Anthropic answer, folding events the way the SDK's MessageStream
 * does. Feed it every SSE event in order. Only the events it needs are parsed, picked by
 * their `event:` name; text and thinking deltas, most of a stream, pass untouched unless
 * a tool call's block is open. Nothing is hidden.
 */
export class AnthropicStreamMeter implements StreamMeter {
  #model: string | undefined;
  #responseId: string | undefined;
  #finishReason: string | undefined;
  // message_start's usage, each counter `message_delta` reports overwriting it: they are
  // cumulative totals for the whole message, never increments.
  #usage: Record<string, unknown> | undefined;
  // message_start's output_tokens (1) stands for an answer not yet written: the output is
  // the count a message_delta gives.
  #outputCounted = false;
  #complete = false;
  #errorEvent: string | undefined;
  // Keyed by the content block's `index`.
  readonly #toolCalls = new Map<number, StreamedToolUse>();
  // Indexes of tool_use blocks started and not yet stopped: only their deltas are parsed.
  readonly #openToolBlocks = new Set<number>();

  /** The data of an `error` event the provider sent inside the stream, as sent. */
  get errorEvent(): string | undefined {
    return this.#errorEvent;
  }

  /** The stream reached `message_stop`. */
  get complete(): boolean {
    return this.#complete;
  }

  observe(event: SseEvent): StreamObservation {
    const data = event.data;
    if (data === undefined) return PLAIN;
    switch (eventType(event)) {
      case "content_block_delta":
        if (this.#openToolBlocks.size > 0) this.#observeDelta(parseObject(data));
        return PLAIN;
      case "content_block_start":
        if (data.includes('"tool_use"')) this.#observeBlockStart(parseObject(data));
        return PLAIN;
      case "content_block_stop":
        if (this.#openToolBlocks.size > 0) this.#observeBlockStop(parseObject(data));
        return PLAIN;
      case "message_start":
        this.#observeMessageStart(parseObject(data));
        return PLAIN;
      case "message_delta":
        this.#observeMessageDelta(parseObject(data));
        return PLAIN;
      case "message_stop":
        this.#complete = true;
        return TERMINAL;
      case "error":
        this.#errorEvent ??= data;
        return PLAIN;
      default:
        return PLAIN;
    }
  }

  summary(): AnswerSummary {
    const calls = [...this.#toolCalls.entries()].sort(([a], [b]) => a - b);
    return {
      model: this.#model,
      // A stream that ended without its output counted did not report its usage whole.
      usage: readAnthropicUsage(
        this.#complete && !this.#outputCounted ? { ...this.#usage, output_tokens: undefined } : this.#usage,
      ),
      finishReason: this.#finishReason,
      toolCalls: calls.map(([, call]) => ({
        id: call.id,
        name: call.name,
        arguments: call.partialJson === "" ? serialised(call.input) : reserialised(call.partialJson),
      })),
      responseId: this.#responseId,
    };
  }

  #observeMessageStart(event: Record<string, unknown> | undefined): void {
    const message = event?.message;
    if (!isRecord(message)) return;
    this.#model = nonEmptyString(message.model);
    this.#responseId = nonEmptyString(message.id);
    if (isRecord(message.usage)) this.#usage = { ...message.usage };
  }

  #observeMessageDelta(event: Record<string, unknown> | undefined): void {
    if (event === undefined) return;
    const delta = event.delta;
    if (isRecord(delta)) this.#finishReason = nonEmptyString(delta.stop_reason) ?? this.#finishReason;
    const usage = event.usage;
    if (!isRecord(usage)) return;
    this.#usage ??= {};
    for (const [counter, value] of Object.entries(usage)) {
      if (value !== null && value !== undefined) this.#usage[counter] = value;
    }
    if (usage.output_tokens !== null && usage.output_tokens !== undefined) this.#outputCounted = true;
  }

  #observeBlockStart(event: Record<string, unknown> | undefined): void {
    if (event === undefined || typeof event.index !== "number") return;
    const call = toolUse(event.content_block);
    if (call === undefined) return;
    this.#toolCalls.set(event.index, { ...call, partialJson: "" });
    this.#openToolBlocks.add(event.index);
  }

  #observeDelta(event: Record<string, unknown> | undefined): void {
    if (event === undefined || typeof event.index !== "number") return;
    if (!this.#openToolBlocks.has(event.index)) return;
    const delta = event.delta;
    if (!isRecord(delta) || delta.type !== "input_json_delta") return;
    const call = this.#toolCalls.get(event.index);
    if (call !== undefined) call.partialJson += stringOr(delta.partial_json);
  }

  #observeBlockStop(event: Record<string, unknown> | undefined): void {
    if (event !== undefined && typeof event.index === "number") this.#openToolBlocks.delete(event.index);
  }
}

/** A `tool_use` content block's id, name and input; undefined for any other block. */
function toolUse(block: unknown): { id: string; name: string; input: unknown } | undefined {
  if (!isRecord(block) || block.type !== "tool_use") return undefined;
  const name = nonEmptyString(block.name);
  if (name === undefined) return undefined;
  return { id: stringOr(block.id), name, input: block.input };
}

function serialised(input: unknown): string {
  return JSON.stringify(input ?? {}) ?? "{}";
}

/**
 * Streamed input as the non-streamed answer would serialise it, so one call reads the
 * same either way; input cut off midway stays as it arrived.
 */
function reserialised(partialJson: string): string {
  try {
    return JSON.stringify(JSON.parse(partialJson));
  } catch {
    return partialJson;
  }
}
