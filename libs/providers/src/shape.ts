import type { ConversationShape } from "./conversation.js";
import type { SseEvent } from "./sse.js";
import type { UsageReport } from "./usage.js";

/** The provider API shapes the gateway speaks, named as events and SQL name them. */
export type ShapeName = "openai_chat_completions" | "openai_responses" | "anthropic_messages";

/** Whose API a shape is: which upstream `gateway.upstream: auto` sends it to. */
export type ProviderFamily = "openai" | "anthropic";

/** What the gateway needs to know about a request before forwarding it, in any shape. */
export interface RequestView {
  readonly model: string;
  readonly stream: boolean;
  /** Conversation items the request carries (the conversation only grows within one loop). */
  readonly messageCount: number;
  /** System (and developer) instructions, as text; "" if none. */
  readonly systemPrompt: string;
  /** Text of the first non-system message; "" if none. */
  readonly firstMessage: string;
  /** The earlier response this request continues (Responses' `previous_response_id`). */
  readonly previousResponseId: string | undefined;
  /** The most output the request allows (max_tokens and its kin); undefined when it sets none. */
  readonly maxOutputTokens: number | undefined;
  /** Tools the request offers the model. */
  readonly toolCount: number;
}

/** Why a request was refused, ready for the shape's error body with `param`. */
export interface RequestProblem {
  readonly message: string;
  readonly param: string | null;
}

export type RequestRead<View extends RequestView = RequestView> =
  | { readonly ok: true; readonly request: View }
  | { readonly ok: false; readonly error: RequestProblem };

/** One tool call the model asked for. */
export interface ToolCall {
  /** The provider's id for the call ("call_…", "toolu_…"); "" when it gave none. */
  readonly id: string;
  readonly name: string;
  /** The arguments as the provider sent them: JSON text (Anthropic's input, serialised). */
  readonly arguments: string;
}

/** What the gateway records about an answer, the same whichever shape it came in. */
export interface AnswerSummary {
  /** The model the provider says answered. */
  readonly model: string | undefined;
  readonly usage: UsageReport;
  /** The shape's own finish/stop reason ("stop", "tool_calls", "end_turn", "completed", …). */
  readonly finishReason: string | undefined;
  readonly toolCalls: readonly ToolCall[];
  /** The provider's id for this response ("chatcmpl-…", "resp_…", "msg_…"). */
  readonly responseId: string | undefined;
}

/** What one stream event means to the gateway. */
export interface StreamObservation {
  /** Not the client's: it exists because the gateway asked for it (Chat Completions' usage chunk). */
  readonly hidden: boolean;
  /**
   * The shape's terminating event (`[DONE]`, `response.completed`, `message_stop`): the
   * answer is whole once it arrives. The gateway holds it back until it decides to deliver.
   */
  readonly terminal: boolean;
}

/** Meters one streamed answer. Feed it every SSE event in order. */
export interface StreamMeter {
  observe(event: SseEvent): StreamObservation;
  summary(): AnswerSummary;
  /** The data of an error event the provider sent inside the stream; undefined when none. */
  readonly errorEvent: string | undefined;
  /** The stream carried its shape's normal end (a terminal event or a final finish reason). */
  readonly complete: boolean;
}

/**
 * What of the provider's stream the client has been sent: how many of its events (those
 * with data), and the last of them. An event of the gateway's own follows them.
 */
export interface StreamSoFar {
  readonly events: number;
  readonly last: SseEvent | undefined;
}

/** The fields of an error the gateway answers itself, before the shape renders them. */
export interface ErrorFields {
  /** OpenAI's error types ("invalid_request_error", "server_error", …); shapes map them. */
  readonly type?: string;
  readonly code?: string | null;
  readonly param?: string | null;
}

/**
 * One provider API shape: everything the gateway's single pipeline needs to know about
 * it. Adding a shape is adding one of these (one folder) and listing it in `SHAPES`.
 */
export interface ApiShape {
  readonly name: ShapeName;
  readonly family: ProviderFamily;
  /** The gateway's route, e.g. "/v1/chat/completions". */
  readonly path: string;
  /** Appended to the upstream base URL, which ends in the version (…/v1): e.g. "/chat/completions". */
  readonly upstreamPath: string;
  /**
   * The provider keeps this shape's responses and a later request may continue one by its
   * id (Responses' `previous_response_id`): the gateway publishes which run each response
   * belongs to as soon as it is named.
   */
  readonly continues: boolean;
  readRequest(body: unknown): RequestRead;
  /**
   * The bytes to send upstream when they must differ from the client's (a Chat Completions
   * stream asks for usage on the client's behalf); undefined: the client's bytes as sent.
   * `raw` is the client's body, `body` the same parsed.
   */
  upstreamBody(body: Record<string, unknown>, view: RequestView, raw: Buffer): Buffer | undefined;
  /** Reads a non-streamed answer's JSON. */
  summarize(json: unknown): AnswerSummary;
  streamMeter(view: RequestView): StreamMeter;
  /** An error in this shape's own envelope, for errors the gateway answers itself. */
  errorBody(message: string, fields?: ErrorFields): unknown;
  /**
   * The same error as the SSE event this shape's streams end with when they fail, written
   * after `sent` (none when the client has no event of the provider's yet): a shape whose
   * events are numbered (Responses' `sequence_number`) gives it the next number.
   */
  streamErrorEvent(message: string, fields?: ErrorFields, sent?: StreamSoFar): string;
  /** Where a request's conversation is, and how it is compacted. */
  readonly conversation: ConversationShape;
}
