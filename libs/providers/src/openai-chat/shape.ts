import { openAIErrorBody } from "../error-shape.js";
import type { ApiShape, RequestView, StreamMeter, StreamObservation } from "../shape.js";
import { formatSseData, type SseEvent } from "../sse.js";
import { chatConversation } from "./conversation.js";
import { type ChatRequestView, readChatRequest, withStreamUsageBytes } from "./request.js";
import { ChatStreamMeter, summarizeChatCompletion } from "./response.js";

const PLAIN: StreamObservation = Object.freeze({ hidden: false, terminal: false });
const HIDDEN: StreamObservation = Object.freeze({ hidden: true, terminal: false });
const TERMINAL: StreamObservation = Object.freeze({ hidden: false, terminal: true });

/** OpenAI Chat Completions: `POST /v1/chat/completions`. */
export const openAIChatShape: ApiShape = {
  name: "openai_chat_completions",
  family: "openai",
  path: "/v1/chat/completions",
  upstreamPath: "/chat/completions",
  continues: false,
  readRequest: readChatRequest,
  // Usage on a stream is only sent when asked for: ask on the client's behalf so every
  // stream is metered (the meter hides the extra chunk from a client that did not ask).
  upstreamBody(body, view, raw) {
    const chat = view as ChatRequestView;
    return chat.stream && !chat.clientWantsUsage ? withStreamUsageBytes(body, raw) : undefined;
  },
  summarize: summarizeChatCompletion,
  streamMeter: (view: RequestView) => new ChatMeter((view as ChatRequestView).clientWantsUsage),
  errorBody: openAIErrorBody,
  // OpenAI SDKs raise a `data: {"error": …}` event as an APIError.
  streamErrorEvent: (message, fields) => formatSseData(openAIErrorBody(message, fields)),
  conversation: chatConversation,
};

class ChatMeter implements StreamMeter {
  readonly #chunks = new ChatStreamMeter();
  #done = false;

  constructor(private readonly clientWantsUsage: boolean) {}

  observe(event: SseEvent): StreamObservation {
    if (event.data === undefined) return PLAIN;
    if (event.data === "[DONE]") {
      this.#done = true;
      return TERMINAL;
    }
    return this.#chunks.observe(event.data).usageOnly && !this.clientWantsUsage ? HIDDEN : PLAIN;
  }

  summary() {
    return this.#chunks.summary();
  }

  get errorEvent(): string | undefined {
    return this.#chunks.errorEvent;
  }

  get complete(): boolean {
    return this.#done || this.#chunks.finishReason !== undefined;
  }
}
