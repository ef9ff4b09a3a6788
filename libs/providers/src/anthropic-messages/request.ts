import { contentText } from "../content.js";
import { isRecord, positiveInt } from "../json.js";
import type { RequestRead, RequestView } from "../shape.js";

/** What the gateway needs to know about an Anthropic Messages request before forwarding it. */
export interface AnthropicRequestView extends RequestView {
  /** Anthropic accepts one field here, `user_id`. */
  readonly metadata: Record<string, unknown> | undefined;
}

export type AnthropicRequestResult = RequestRead<AnthropicRequestView>;

const TEXT_BLOCKS: ReadonlySet<string> = new Set(["text"]);

/**
 * Checks the few fields the gateway relies on and reads them. Everything else is the
 * provider's to validate: the body is forwarded as it came. Anthropic's error envelope
 * has no `param`, so each message names its field, in Anthropic's own dotted paths
 * (`messages.1.content`).
 */
export function readAnthropicRequest(body: unknown): AnthropicRequestResult {
  if (!isRecord(body)) return refuse("The request body must be a JSON object.", null);

  const model = body.model;
  if (typeof model !== "string" || model.length === 0) {
    return refuse("'model' must be a non-empty string.", "model");
  }

  const stream = body.stream;
  if (stream !== undefined && stream !== null && typeof stream !== "boolean") {
    return refuse("'stream' must be a boolean.", "stream");
  }

  const metadata = body.metadata;
  if (metadata !== undefined && metadata !== null && !isRecord(metadata)) {
    return refuse("'metadata' must be an object.", "metadata");
  }

  const system = body.system;
  if (system !== undefined && system !== null && typeof system !== "string" && !Array.isArray(system)) {
    return refuse("'system' must be a string or an array of text blocks.", "system");
  }

  const messages = body.messages;
  if (!Array.isArray(messages)) return refuse("'messages' must be an array.", "messages");

  const systemTexts: string[] =
    system === undefined || system === null ? [] : [contentText(system, TEXT_BLOCKS)];
  let firstMessage: string | undefined;
  for (let i = 0; i < messages.length; i++) {
    const message: unknown = messages[i];
    if (!isRecord(message)) return refuse(`'messages.${i}' must be an object.`, `messages.${i}`);
    const role = message.role;
    if (typeof role !== "string") {
      return refuse(`'messages.${i}.role' must be a string.`, `messages.${i}.role`);
    }
    const content = message.content;
    if (typeof content !== "string" && !Array.isArray(content)) {
      return refuse(
        `'messages.${i}.content' must be a string or an array of content blocks.`,
        `messages.${i}.content`,
      );
    }
    // Only the text that is used gets built: long histories cost one pass of type checks.
    // Newer API versions also take system turns among the messages.
    if (role === "system") systemTexts.push(contentText(content, TEXT_BLOCKS));
    else firstMessage ??= contentText(content, TEXT_BLOCKS);
  }

  return {
    ok: true,
    request: {
      model,
      stream: stream === true,
      messageCount: messages.length,
      systemPrompt: systemTexts.join("\n\n"),
      firstMessage: firstMessage ?? "",
      previousResponseId: undefined,
      maxOutputTokens: positiveInt(body.max_tokens),
      toolCount: Array.isArray(body.tools) ? body.tools.length : 0,
      metadata: isRecord(metadata) ? metadata : undefined,
    },
  };
}

function refuse(message: string, param: string | null): AnthropicRequestResult {
  return { ok: false, error: { message, param } };
}
