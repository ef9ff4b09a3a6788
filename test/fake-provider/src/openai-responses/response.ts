import { randomBytes } from "node:crypto";
import { digest } from "../hash.js";
import { fragments, type PlannedCall, type Reply, words } from "../reply.js";
import { sse } from "../sse.js";
import type { ResponsesRequest } from "./request.js";

export interface ResponsesUsage {
  readonly input_tokens: number;
  readonly input_tokens_details: { readonly cached_tokens: number };
  readonly output_tokens: number;
  readonly output_tokens_details: { readonly reasoning_tokens: number };
  readonly total_tokens: number;
}

/** What the fake decided about one response, before it is written either way. */
export interface ResponsePlan {
  readonly id: string;
  /** Seconds since the epoch. */
  readonly createdAt: number;
  readonly request: ResponsesRequest;
  readonly reply: Reply;
  readonly usage: ResponsesUsage;
}

/** `resp_` and 50 hex digits, as OpenAI's ids look; unique, so a conversation can go on from it. */
export function responseId(): string {
  return `resp_${randomBytes(25).toString("hex")}`;
}

export function usageOf(inputTokens: number, outputTokens: number, cachedTokens: number): ResponsesUsage {
  return {
    input_tokens: inputTokens,
    input_tokens_details: { cached_tokens: cachedTokens },
    output_tokens: outputTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: inputTokens + outputTokens,
  };
}

type ItemStatus = "in_progress" | "completed" | "incomplete";

function messageId(plan: ResponsePlan): string {
  return `msg_${digest(plan.id, "message").slice(0, 50)}`;
}

function textPart(text: string): Record<string, unknown> {
  return { type: "output_text", annotations: [], logprobs: [], text };
}

function messageItem(
  plan: ResponsePlan,
  status: ItemStatus,
  content: readonly unknown[],
): Record<string, unknown> {
  return { id: messageId(plan), type: "message", status, content, role: "assistant" };
}

function callItem(call: PlannedCall, status: ItemStatus, args: string): Record<string, unknown> {
  return {
    id: `fc_${digest(call.seed, "item").slice(0, 50)}`,
    type: "function_call",
    status,
    arguments: args,
    call_id: `call_${call.seed.slice(0, 24)}`,
    name: call.name,
  };
}

function truncated(plan: ResponsePlan): boolean {
  return plan.reply.finishReason === "length";
}

/** The finished output: one message, or one `function_call` item per call. */
function outputOf(plan: ResponsePlan): Array<Record<string, unknown>> {
  const { content, toolCalls } = plan.reply;
  if (content === null) return toolCalls.map((call) => callItem(call, "completed", call.arguments));
  return [messageItem(plan, truncated(plan) ? "incomplete" : "completed", [textPart(content)])];
}

/** The `response` object; `finished` false gives it as it stands when the stream opens. */
function responseObject(plan: ResponsePlan, finished: boolean): Record<string, unknown> {
  const { request } = plan;
  const status = !finished ? "in_progress" : truncated(plan) ? "incomplete" : "completed";
  return {
    id: plan.id,
    object: "response",
    created_at: plan.createdAt,
    status,
    background: false,
    completed_at: status === "completed" ? plan.createdAt : null,
    error: null,
    incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
    instructions: request.instructions,
    max_tool_calls: null,
    model: request.model,
    output: finished ? outputOf(plan) : [],
    previous_response_id: request.previousResponseId,
    prompt_cache_key: null,
    safety_identifier: null,
    service_tier: "default",
    store: request.store,
    tools: request.tools,
    top_logprobs: 0,
    usage: finished ? plan.usage : null,
    ...request.settings,
  };
}

/** A `response` object, as OpenAI sends it. */
export function responseBody(plan: ResponsePlan): string {
  return JSON.stringify(responseObject(plan, true));
}

/**
 * The server-sent events of a streamed response, one string per event: the response created and
 * in progress, each output item opened, filled by deltas and closed, then the whole response,
 * usage included. Each event is named and numbered; there is no `[DONE]`.
 */
export function responseEvents(plan: ResponsePlan): string[] {
  const events: string[] = [];
  const emit = (type: string, fields: Record<string, unknown>): void => {
    events.push(sse({ type, sequence_number: events.length, ...fields }, type));
  };
  const finished = outputOf(plan);

  emit("response.created", { response: responseObject(plan, false) });
  emit("response.in_progress", { response: responseObject(plan, false) });

  const { content, toolCalls } = plan.reply;
  if (content !== null) {
    const at = { item_id: messageId(plan), output_index: 0, content_index: 0 };
    emit("response.output_item.added", { output_index: 0, item: messageItem(plan, "in_progress", []) });
    emit("response.content_part.added", { ...at, part: textPart("") });
    for (const word of words(content))
      emit("response.output_text.delta", { ...at, delta: word, logprobs: [] });
    emit("response.output_text.done", { ...at, text: content, logprobs: [] });
    emit("response.content_part.done", { ...at, part: textPart(content) });
    emit("response.output_item.done", { output_index: 0, item: finished[0] });
  }
  toolCalls.forEach((call, output_index) => {
    const item = callItem(call, "in_progress", "");
    const at = { item_id: item.id, output_index };
    emit("response.output_item.added", { output_index, item });
    for (const fragment of fragments(call.arguments)) {
      emit("response.function_call_arguments.delta", { ...at, delta: fragment });
    }
    emit("response.function_call_arguments.done", { ...at, name: call.name, arguments: call.arguments });
    emit("response.output_item.done", { output_index, item: finished[output_index] });
  });

  // A response cut short by max_output_tokens ends with response.incomplete, as OpenAI's does.
  const last = truncated(plan) ? "response.incomplete" : "response.completed";
  emit(last, { response: responseObject(plan, true) });
  return events;
}
