import { isRecord, nonEmptyString, startsLikeObject, stringOr } from "../json.js";
import type { AnswerSummary, ToolCall } from "../shape.js";
import { NO_USAGE, type UsageReport } from "../usage.js";
import { readChatUsage } from "./usage.js";

/**
 * Reads a non-streamed `chat.completion` response. With `n > 1` the finish reason is the
 * first choice's (the one an agent usually continues from), and the tool calls are every
 * choice's, in choice order: an agent may act on any of them, so the gate sees them all.
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
  if (choice !== undefined && typeof choice.finish_reason === "string") finishReason = choice.finish_reason;
  for (const each of Array.isArray(json.choices) ? json.choices : []) {
    const message = isRecord(each) ? each.message : undefined;
    if (!isRecord(message)) continue;
    // The legacy `functions` API: one call, `function_call`, without an id.
    const legacy = isRecord(message.function_call) ? message.function_call : undefined;
    const legacyName = nonEmptyString(legacy?.name);
    if (legacyName !== undefined)
      toolCalls.push({ id: "", name: legacyName, arguments: stringOr(legacy?.arguments) });
    if (!Array.isArray(message.tool_calls)) continue;
    for (const call of message.tool_calls) {
      const body = callBody(call);
      const name = nonEmptyString(body?.name);
      if (body === undefined || name === undefined || !isRecord(call)) continue;
      toolCalls.push({ id: stringOr(call.id), name, arguments: stringOr(body.arguments ?? body.input) });
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

/**
 * What a chunk must contain for the meter to learn anything from it: usage or a finish
 * reason that is not null (under any key, Groq's `x_groq.usage` too), tool calls, a legacy
 * function call, an error. Text that merely mentions one of them only costs a parse.
 */
const MAY_BE_METERED = /"(?:usage|finish_reason)"\s*:\s*[^\sn]|"tool_calls"|"function_call"|"error"/;

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
  // Keyed by choice and the delta's `index`, which later argument fragments repeat without the name.
  readonly #toolCalls = new Map<string, { id: string; name: string; arguments: string }>();
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
    // Most of a stream is text: once the model and id are known, a chunk that names no
    // usage, finish reason, tool call or error holds nothing to meter and is not parsed.
    if (this.#model !== undefined && this.#responseId !== undefined && !MAY_BE_METERED.test(data)) {
      return NOT_USAGE_ONLY;
    }
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
    // Some providers repeat a running total in every chunk; the last one is the whole call
    // (one that cannot be used too: what was wrong with it is recorded).
    if (usage.reported || usage.problem !== undefined) this.#usage = usage;

    const choices = chunk.choices;
    if (!Array.isArray(choices)) return NOT_USAGE_ONLY;
    if (choices.length === 0) return isRecord(chunk.usage) ? USAGE_ONLY : NOT_USAGE_ONLY;
    for (const choice of choices) {
      if (!isRecord(choice)) continue;
      const index = typeof choice.index === "number" ? choice.index : 0;
      if (index === 0 && typeof choice.finish_reason === "string") this.#finishReason = choice.finish_reason;
      const delta = choice.delta;
      if (!isRecord(delta)) continue;
      if (Array.isArray(delta.tool_calls)) this.#observeToolCalls(index, delta.tool_calls);
      // The legacy `functions` API streams one call as `function_call` fragments.
      if (isRecord(delta.function_call)) {
        this.#observeToolCalls(index, [{ index: -1, function: delta.function_call }]);
      }
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
      toolCalls: [...this.#toolCalls.entries()]
        .sort(([a], [b]) => a.localeCompare(b, "en", { numeric: true }))
        .map(([, call]) => ({ ...call })),
      responseId: this.#responseId,
    };
  }

  #observeToolCalls(choice: number, calls: unknown[]): void {
    for (const call of calls) {
      if (!isRecord(call)) continue;
      // OpenAI names a call once, in its first fragment, and streams its arguments in the
      // fragments after it under the same index; providers that repeat the whole call in
      // later chunks must not count it twice. Without an index, the id tells calls apart.
      const key =
        typeof call.index === "number"
          ? `${choice}:${call.index}`
          : typeof call.id === "string"
            ? `${choice}:${call.id}`
            : undefined;
      const body = callBody(call);
      const fragment = stringOr(body?.arguments ?? body?.input);
      const known = key === undefined ? undefined : this.#toolCalls.get(key);
      if (known !== undefined) {
        // A provider that repeats whole calls repeats their arguments too.
        if (typeof call.index === "number") known.arguments += fragment;
        continue;
      }
      const name = nonEmptyString(body?.name);
      if (name === undefined) continue;
      this.#toolCalls.set(key ?? `${choice}:#${this.#toolCalls.size}`, {
        id: stringOr(call.id),
        name,
        arguments: fragment,
      });
    }
  }
}

function readUsage(json: Record<string, unknown>): UsageReport {
  const usage = readChatUsage(json.usage);
  if (usage.reported || usage.problem !== undefined) return usage;
  // Groq has reported streamed usage under `x_groq` instead of the standard field.
  const groq = json.x_groq;
  return isRecord(groq) ? readChatUsage(groq.usage) : usage;
}

function firstChoice(choices: unknown): Record<string, unknown> | undefined {
  if (!Array.isArray(choices)) return undefined;
  const choice: unknown = choices[0];
  return isRecord(choice) ? choice : undefined;
}

/**
 * What a tool call says: `function` ({name, arguments}) or, for custom tools, `custom`
 * ({name, input}: free text, not JSON).
 */
function callBody(call: unknown): Record<string, unknown> | undefined {
  if (!isRecord(call)) return undefined;
  if (isRecord(call.function)) return call.function;
  if (isRecord(call.custom)) return call.custom;
  return undefined;
}
