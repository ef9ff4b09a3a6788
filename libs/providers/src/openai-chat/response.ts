import { isRecord, nonEmptyString, startsLikeObject, stringOr } from "../json.js";
import type { AnswerSummary, ToolCall } from "../shape.js";
import { NO_USAGE, type UsageReport } from "../usage.js";
import { readChatUsage } from "./usage.js";

/**
 * Reads a non-streamed `chat.completion` response. With `n > 1` only the first choice
 * counts: it is the one an agent continues from.
 */
export function summarizeChatCompletion(json: unknown): AnswerSummary {
  if (!isRecord(json)) {
    return {
      model: undefined,
      usage: NO_USAGE,
      finishReason: undefined,
      toolCalls: [],
      responseId: undefined,
    };
  }
  const choice = firstChoice(json.choices);
  const toolCalls: ToolCall[] = [];
  let finishReason: string | undefined;
  if (choice !== undefined) {
    if (typeof choice.finish_reason === "string") finishReason = choice.finish_reason;
    const message = choice.message;
    if (isRecord(message) && Array.isArray(message.tool_calls)) {
      for (const call of message.tool_calls) {
        const name = functionName(call);
        if (name === undefined || !isRecord(call)) continue;
        const args = isRecord(call.function) ? call.function.arguments : undefined;
        toolCalls.push({ id: stringOr(call.id), name, arguments: stringOr(args) });
      }
    }
  }
  return {
    model: nonEmptyString(json.model),
    usage: readUsage(json),
    finishReason,
    toolCalls,
    responseId: nonEmptyString(json.id),
  };
}

export interface ChatChunkObservation {
  /**
   * This chunk is the usage-only one (`choices: []` with a `usage` object) that the
   * provider sends because the gateway asked for it; a client that did not ask should
   * not see it.
   */
  readonly usageOnly: boolean;
}

const USAGE_ONLY: ChatChunkObservation = Object.freeze({ usageOnly: true });
const NOT_USAGE_ONLY: ChatChunkObservation = Object.freeze({ usageOnly: false });

/**
 * Meters a streamed Chat Completions response. Feed it the `data` of every SSE event in
 * order; `summary()` then says what a non-streamed response would have.
 */
export class ChatStreamMeter {
  #model: string | undefined;
  #usage: UsageReport = NO_USAGE;
  #finishReason: string | undefined;
  #responseId: string | undefined;
  // Keyed by the delta's `index`, which later argument fragments repeat without the name.
  readonly #toolCalls = new Map<number | string, { id: string; name: string; arguments: string }>();
  #errorEvent: string | undefined;

  /**
   * The data of an error event the provider sent inside the stream (`{"error": …}` after
   * a 200, when generation fails midway), as sent; undefined when there was none.
   */
  get errorEvent(): string | undefined {
    return this.#errorEvent;
  }

  observe(data: string): ChatChunkObservation {
    // Cheap exit before JSON.parse: "[DONE]", keepalive text, anything not an object.
    if (!startsLikeObject(data)) return NOT_USAGE_ONLY;
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      return NOT_USAGE_ONLY;
    }
    if (!isRecord(chunk)) return NOT_USAGE_ONLY;
    if (chunk.error !== undefined && chunk.error !== null && chunk.choices === undefined) {
      this.#errorEvent ??= data;
      return NOT_USAGE_ONLY;
    }

    if (this.#model === undefined) this.#model = nonEmptyString(chunk.model);
    if (this.#responseId === undefined) this.#responseId = nonEmptyString(chunk.id);
    const usage = readUsage(chunk);
    // Some providers repeat a running total in every chunk; the last one is the whole call.
    if (usage.reported) this.#usage = usage;

    const choices = chunk.choices;
    if (!Array.isArray(choices)) return NOT_USAGE_ONLY;
    if (choices.length === 0) return isRecord(chunk.usage) ? USAGE_ONLY : NOT_USAGE_ONLY;
    for (const choice of choices) {
      if (!isRecord(choice) || (choice.index !== undefined && choice.index !== 0)) continue;
      if (typeof choice.finish_reason === "string") this.#finishReason = choice.finish_reason;
      const delta = choice.delta;
      if (isRecord(delta) && Array.isArray(delta.tool_calls)) this.#observeToolCalls(delta.tool_calls);
    }
    return NOT_USAGE_ONLY;
  }

  /** The answer's finish reason, once a chunk carried one. */
  get finishReason(): string | undefined {
    return this.#finishReason;
  }

  summary(): AnswerSummary {
    return {
      model: this.#model,
      usage: this.#usage,
      finishReason: this.#finishReason,
      toolCalls: [...this.#toolCalls.values()].map((call) => ({ ...call })),
      responseId: this.#responseId,
    };
  }

  #observeToolCalls(calls: unknown[]): void {
    for (const call of calls) {
      if (!isRecord(call)) continue;
      // OpenAI names a call once, in its first fragment, and streams its arguments in the
      // fragments after it under the same index; providers that repeat the whole call in
      // later chunks must not count it twice. Without an index, the id tells calls apart.
      const key =
        typeof call.index === "number" ? call.index : typeof call.id === "string" ? call.id : undefined;
      const fragment = isRecord(call.function) ? stringOr(call.function.arguments) : "";
      const known = key === undefined ? undefined : this.#toolCalls.get(key);
      if (known !== undefined) {
        // A provider that repeats whole calls repeats their arguments too.
        if (typeof call.index === "number") known.arguments += fragment;
        continue;
      }
      const name = functionName(call);
      if (name === undefined) continue;
      this.#toolCalls.set(key ?? `#${this.#toolCalls.size}`, {
        id: stringOr(call.id),
        name,
        arguments: fragment,
      });
    }
  }
}

function readUsage(json: Record<string, unknown>): UsageReport {
  const usage = readChatUsage(json.usage);
  if (usage.reported) return usage;
  // Groq has reported streamed usage under `x_groq` instead of the standard field.
  const groq = json.x_groq;
  return isRecord(groq) ? readChatUsage(groq.usage) : usage;
}

function firstChoice(choices: unknown): Record<string, unknown> | undefined {
  if (!Array.isArray(choices)) return undefined;
  const choice: unknown = choices[0];
  return isRecord(choice) ? choice : undefined;
}

function functionName(call: unknown): string | undefined {
  if (!isRecord(call) || !isRecord(call.function)) return undefined;
  const name = call.function.name;
  return typeof name === "string" && name.length > 0 ? name : undefined;
}
