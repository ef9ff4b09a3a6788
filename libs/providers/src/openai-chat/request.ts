import { contentText } from "../content.js";
import { isRecord, positiveInt } from "../json.js";
import type { RequestRead, RequestView } from "../shape.js";

/** What the gateway needs to know about a Chat Completions request before forwarding it. */
export interface ChatRequestView extends RequestView {
  /** The client asked for the usage-only chunk (`stream_options.include_usage: true`). */
  readonly clientWantsUsage: boolean;
  readonly metadata: Record<string, unknown> | undefined;
}

export type ChatRequestResult = RequestRead<ChatRequestView>;

const SYSTEM_ROLES = new Set(["system", "developer"]);
const TEXT_PARTS: ReadonlySet<string> = new Set(["text"]);

/**
 * Checks the few fields the gateway relies on and reads them. Everything else is the
 * provider's to validate: the body is forwarded as it came.
 */
export function readChatRequest(body: unknown): ChatRequestResult {
  if (!isRecord(body)) return refuse("The request body must be a JSON object.", null);

  const model = body.model;
  if (typeof model !== "string" || model.length === 0) {
    return refuse("'model' must be a non-empty string.", "model");
  }

  const stream = body.stream;
  if (stream !== undefined && stream !== null && typeof stream !== "boolean") {
    return refuse("'stream' must be a boolean.", "stream");
  }

  const streamOptions = body.stream_options;
  if (streamOptions !== undefined && streamOptions !== null && !isRecord(streamOptions)) {
    return refuse("'stream_options' must be an object.", "stream_options");
  }

  const metadata = body.metadata;
  if (metadata !== undefined && metadata !== null && !isRecord(metadata)) {
    return refuse("'metadata' must be an object.", "metadata");
  }

  const messages = body.messages;
  if (!Array.isArray(messages)) return refuse("'messages' must be an array.", "messages");

  const system: string[] = [];
  let firstMessage: string | undefined;
  for (let i = 0; i < messages.length; i++) {
    const message: unknown = messages[i];
    if (!isRecord(message)) return refuse(`'messages[${i}]' must be an object.`, `messages[${i}]`);
    const role = message.role;
    if (typeof role !== "string") {
      return refuse(`'messages[${i}].role' must be a string.`, `messages[${i}].role`);
    }
    const content = message.content;
    if (content !== undefined && content !== null && typeof content !== "string" && !Array.isArray(content)) {
      return refuse(
        `'messages[${i}].content' must be a string, an array of content parts, or null.`,
        `messages[${i}].content`,
      );
    }
    // Only the text that is used gets built: long histories cost one pass of type checks.
    if (SYSTEM_ROLES.has(role)) system.push(contentText(content, TEXT_PARTS));
    else if (firstMessage === undefined) firstMessage = contentText(content, TEXT_PARTS);
  }

  return {
    ok: true,
    request: {
      model,
      stream: stream === true,
      clientWantsUsage: isRecord(streamOptions) && streamOptions.include_usage === true,
      messageCount: messages.length,
      systemPrompt: system.join("\n\n"),
      firstMessage: firstMessage ?? "",
      metadata: isRecord(metadata) ? metadata : undefined,
      previousResponseId: undefined,
      maxOutputTokens: positiveInt(body.max_completion_tokens) ?? positiveInt(body.max_tokens),
      toolCount: Array.isArray(body.tools) ? body.tools.length : 0,
    },
  };
}

/**
 * The body to send upstream when the gateway must meter a stream: the provider only
 * reports usage on streams that ask for it. The caller's object is not changed.
 */
export function withStreamUsage(body: Record<string, unknown>): Record<string, unknown> {
  const options = isRecord(body.stream_options) ? body.stream_options : undefined;
  return { ...body, stream_options: { ...options, include_usage: true } };
}

/**
 * `withStreamUsage` as the bytes to send: a body without `stream_options` gets them
 * written in front of its first member, the client's own bytes kept as they came (a long
 * conversation is not serialized again on its way to the first token); otherwise the body
 * is serialized with them merged in.
 */
export function withStreamUsageBytes(body: Record<string, unknown>, raw: Buffer): Buffer {
  if (!("stream_options" in body)) {
    const open = raw.indexOf(OPEN_BRACE);
    const next = open === -1 ? -1 : nextNonSpace(raw, open + 1);
    if (next !== -1 && raw[next] !== CLOSE_BRACE) {
      return Buffer.concat([raw.subarray(0, open + 1), USAGE_MEMBER, raw.subarray(open + 1)]);
    }
  }
  return Buffer.from(JSON.stringify(withStreamUsage(body)));
}

const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const USAGE_MEMBER = Buffer.from('"stream_options":{"include_usage":true},');

/** Index of the first byte at or after `from` that is not JSON whitespace; -1 if none. */
function nextNonSpace(raw: Buffer, from: number): number {
  for (let i = from; i < raw.length; i++) {
    const byte = raw[i];
    if (byte !== 0x20 && byte !== 0x09 && byte !== 0x0a && byte !== 0x0d) return i;
  }
  return -1;
}

function refuse(message: string, param: string | null): ChatRequestResult {
  return { ok: false, error: { message, param } };
}
