import { isRecord, nonEmptyString, parseObject, stringOr } from "../json.js";
import type { AnswerSummary, StreamMeter, StreamObservation, ToolCall } from "../shape.js";
import { eventType, type SseEvent } from "../sse.js";
import { NO_USAGE, type UsageReport } from "../usage.js";
import { readResponsesUsage } from "./usage.js";

/**
 * Reads a non-streamed Responses API `response` object. The finish reason is its
 * `status`; an incomplete response says why after a colon ("incomplete:max_output_tokens",
 * "incomplete:content_filter"), so every truncated answer still starts with "incomplete".
 */
export function summarizeResponse(json: unknown): AnswerSummary {
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
  if (Array.isArray(json.output)) {
    for (const item of json.output) {
      const call = functionCall(item);
      if (call !== undefined) toolCalls.push(call);
    }
  }
  return {
    model: nonEmptyString(json.model),
    usage: readResponsesUsage(json.usage),
    finishReason: finishReasonOf(json),
    toolCalls,
    responseId: nonEmptyString(json.id),
  };
}

const PLAIN: StreamObservation = Object.freeze({ hidden: false, terminal: false });
const TERMINAL: StreamObservation = Object.freeze({ hidden: false, terminal: true });

/**
 * Meters a streamed Responses API answer. Feed it every SSE event in order. Only the
 * events it needs are parsed, picked by their `event:` name: text and reasoning deltas,
 * most of a stream, pass untouched. Nothing is hidden: the gateway asks for nothing the
 * client did not, since every stream carries its usage in its last event.
 */
export class ResponsesStreamMeter implements StreamMeter {
  #model: string | undefined;
  #responseId: string | undefined;
  #usage: UsageReport = NO_USAGE;
  #finishReason: string | undefined;
  #complete = false;
  #errorEvent: string | undefined;
  // Keyed by `output_index`, as the SDK's ResponseStream folds argument deltas.
  readonly #toolCalls = new Map<number, { id: string; name: string; arguments: string }>();

  /**
   * The provider's error: the data of an `error` event as sent, or, for a response that
   * ended `response.failed`, its `error` object in OpenAI's envelope (`{"error": {code,
   * message}}`), so the call is recorded as failed either way.
   */
  get errorEvent(): string | undefined {
    return this.#errorEvent;
  }

  /** The stream reached `response.completed`, `response.incomplete` or `response.failed`. */
  get complete(): boolean {
    return this.#complete;
  }

  observe(event: SseEvent): StreamObservation {
    const data = event.data;
    if (data === undefined) return PLAIN;
    switch (eventType(event)) {
      case "response.created":
        this.#observeCreated(data);
        return PLAIN;
      case "response.output_item.added":
      case "response.output_item.done":
        // A finished message item carries its whole text: parse only what may be a call.
        if (data.includes('_call"')) this.#observeItem(parseObject(data));
        return PLAIN;
      case "response.function_call_arguments.delta":
        this.#observeArgumentsDelta(parseObject(data));
        return PLAIN;
      case "response.function_call_arguments.done":
        this.#observeArgumentsDone(parseObject(data));
        return PLAIN;
      case "response.completed":
      case "response.incomplete":
        this.#observeEnd(parseObject(data));
        return TERMINAL;
      case "response.failed":
        this.#errorEvent ??= failure(this.#observeEnd(parseObject(data))?.error);
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
      usage: this.#usage,
      finishReason: this.#finishReason,
      toolCalls: calls.map(([, call]) => ({ ...call })),
      responseId: this.#responseId,
    };
  }

  #observeCreated(data: string): void {
    const response = parseObject(data)?.response;
    if (!isRecord(response)) return;
    this.#model ??= nonEmptyString(response.model);
    this.#responseId ??= nonEmptyString(response.id);
  }

  #observeItem(event: Record<string, unknown> | undefined): void {
    if (event === undefined || typeof event.output_index !== "number") return;
    const call = functionCall(event.item);
    if (call !== undefined) this.#toolCalls.set(event.output_index, call);
  }

  #observeArgumentsDelta(event: Record<string, unknown> | undefined): void {
    if (event === undefined || typeof event.output_index !== "number") return;
    const call = this.#toolCalls.get(event.output_index);
    if (call !== undefined) call.arguments += stringOr(event.delta);
  }

  #observeArgumentsDone(event: Record<string, unknown> | undefined): void {
    if (event === undefined || typeof event.output_index !== "number") return;
    const call = this.#toolCalls.get(event.output_index);
    // The whole arguments, which win over the deltas gathered so far.
    if (call !== undefined && typeof event.arguments === "string") call.arguments = event.arguments;
  }

  /** The last event holds the whole response: usage, status and every output item. */
  #observeEnd(event: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
    this.#complete = true;
    const response = event?.response;
    if (!isRecord(response)) return undefined;
    this.#model = nonEmptyString(response.model) ?? this.#model;
    this.#responseId = nonEmptyString(response.id) ?? this.#responseId;
    this.#usage = readResponsesUsage(response.usage);
    this.#finishReason = finishReasonOf(response);
    if (Array.isArray(response.output)) {
      for (let index = 0; index < response.output.length; index++) {
        const call = functionCall(response.output[index]);
        if (call !== undefined) this.#toolCalls.set(index, call);
      }
    }
    return response;
  }
}

// Output items that ask the client to act, and the name a built-in tool's call goes by.
// Items the provider runs itself (web and file search, code interpreter, image generation,
// remote MCP calls) have already happened when the answer arrives and are not the agent's
// to carry out.
const BUILT_IN_CALLS: Readonly<Record<string, { name: string; field: string }>> = {
  computer_call: { name: "computer", field: "action" },
  local_shell_call: { name: "local_shell", field: "action" },
  shell_call: { name: "shell", field: "action" },
  apply_patch_call: { name: "apply_patch", field: "operation" },
};

/**
 * An output item that asks the agent to act, as a tool call: a `function_call` (its JSON
 * arguments), a `custom_tool_call` (its free-text input), or a built-in tool's call (its
 * action as JSON, under the tool's name); undefined for any other item.
 */
function functionCall(item: unknown): { id: string; name: string; arguments: string } | undefined {
  if (!isRecord(item) || typeof item.type !== "string") return undefined;
  const id = stringOr(item.call_id);
  if (item.type === "function_call" || item.type === "custom_tool_call") {
    const name = nonEmptyString(item.name);
    if (name === undefined) return undefined;
    return { id, name, arguments: stringOr(item.type === "function_call" ? item.arguments : item.input) };
  }
  const builtIn = BUILT_IN_CALLS[item.type];
  if (builtIn === undefined) return undefined;
  return { id, name: builtIn.name, arguments: JSON.stringify(item[builtIn.field] ?? {}) };
}

function finishReasonOf(response: Record<string, unknown>): string | undefined {
  const status = nonEmptyString(response.status);
  if (status !== "incomplete") return status;
  const details = response.incomplete_details;
  const reason = isRecord(details) ? nonEmptyString(details.reason) : undefined;
  return reason === undefined ? status : `${status}:${reason}`;
}

/** A failed response's `error` (`{code, message}`) in OpenAI's error envelope. */
function failure(error: unknown): string {
  return JSON.stringify({
    error: isRecord(error) ? error : { message: "The provider reported the response as failed.", code: null },
  });
}
