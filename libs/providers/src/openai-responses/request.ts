import { contentText } from "../content.js";
import { isRecord, nonEmptyString, positiveInt } from "../json.js";
import type { RequestRead, RequestView } from "../shape.js";

/** What the gateway needs to know about a Responses API request before forwarding it. */
export interface ResponsesRequestView extends RequestView {
  readonly metadata: Record<string, unknown> | undefined;
}

export type ResponsesRequestResult = RequestRead<ResponsesRequestView>;

const SYSTEM_ROLES = new Set(["system", "developer"]);
// An assistant turn given back as input carries `output_text` parts.
const TEXT_PARTS: ReadonlySet<string> = new Set(["input_text", "output_text"]);

/**
 * Checks the few fields the gateway relies on and reads them. Everything else is the
 * provider's to validate: the body is forwarded as it came. `input` may be absent (a
 * stored prompt, or a conversation continued by id): the request then carries no items.
 */
export function readResponsesRequest(body: unknown): ResponsesRequestResult {
  if (!isRecord(body)) return refuse("The request body must be a JSON object.", null);

  const model = body.model;
  if (typeof model !== "string" || model.length === 0) {
    return refuse("'model' must be a non-empty string.", "model");
  }

  const stream = body.stream;
  if (stream !== undefined && stream !== null && typeof stream !== "boolean") {
    return refuse("'stream' must be a boolean.", "stream");
  }

  const instructions = body.instructions;
  if (instructions !== undefined && instructions !== null && typeof instructions !== "string") {
    return refuse("'instructions' must be a string or null.", "instructions");
  }

  const previous = body.previous_response_id;
  if (previous !== undefined && previous !== null && typeof previous !== "string") {
    return refuse("'previous_response_id' must be a string or null.", "previous_response_id");
  }

  const metadata = body.metadata;
  if (metadata !== undefined && metadata !== null && !isRecord(metadata)) {
    return refuse("'metadata' must be an object.", "metadata");
  }

  const input = body.input;
  const system: string[] = typeof instructions === "string" ? [instructions] : [];
  let firstMessage: string | undefined;
  let messageCount = 0;
  if (typeof input === "string") {
    messageCount = 1;
    firstMessage = input;
  } else if (Array.isArray(input)) {
    messageCount = input.length;
    for (let i = 0; i < input.length; i++) {
      const item: unknown = input[i];
      if (!isRecord(item)) return refuse(`'input[${i}]' must be an object.`, `input[${i}]`);
      const role = item.role;
      if (role === undefined) {
        // Not a message (a tool call's output, a reasoning item, a reference): it stands
        // in as its JSON, like a content part that is not text.
        firstMessage ??= JSON.stringify(item);
        continue;
      }
      if (typeof role !== "string") {
        return refuse(`'input[${i}].role' must be a string.`, `input[${i}].role`);
      }
      const content = item.content;
      if (typeof content !== "string" && !Array.isArray(content)) {
        return refuse(
          `'input[${i}].content' must be a string or an array of content parts.`,
          `input[${i}].content`,
        );
      }
      // Only the text that is used gets built: long histories cost one pass of type checks.
      if (SYSTEM_ROLES.has(role)) system.push(contentText(content, TEXT_PARTS));
      else firstMessage ??= contentText(content, TEXT_PARTS);
    }
  } else if (input !== undefined && input !== null) {
    return refuse("'input' must be a string or an array of input items.", "input");
  }

  return {
    ok: true,
    request: {
      model,
      stream: stream === true,
      messageCount,
      systemPrompt: system.join("\n\n"),
      firstMessage: firstMessage ?? "",
      previousResponseId: nonEmptyString(previous),
      maxOutputTokens: positiveInt(body.max_output_tokens),
      toolCount: Array.isArray(body.tools) ? body.tools.length : 0,
      metadata: isRecord(metadata) ? metadata : undefined,
    },
  };
}

function refuse(message: string, param: string | null): ResponsesRequestResult {
  return { ok: false, error: { message, param } };
}
