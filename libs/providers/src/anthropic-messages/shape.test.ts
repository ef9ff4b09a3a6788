import { describe, expect, it } from "vitest";
import { readProviderError } from "../error-shape.js";
import { SseParser } from "../sse.js";
import { anthropicMessagesShape } from "./shape.js";

describe("anthropicMessagesShape", () => {
  it("given a streamed request, then the client's body goes upstream unchanged", () => {
    const body = { model: "claude-sonnet-4-5", max_tokens: 64, stream: true, messages: [] };
    const read = anthropicMessagesShape.readRequest(body);
    if (!read.ok) throw new Error(read.error.message);
    expect(
      anthropicMessagesShape.upstreamBody(body, read.request, Buffer.from(JSON.stringify(body))),
    ).toBeUndefined();
  });

  it("given a refusal, then the error body is Anthropic's, with OpenAI's server_error as api_error", () => {
    expect(anthropicMessagesShape.errorBody("'messages' must be an array.", { param: "messages" })).toEqual({
      type: "error",
      error: { type: "invalid_request_error", message: "'messages' must be an array." },
    });
    expect(anthropicMessagesShape.errorBody("Broke.", { type: "server_error" })).toEqual({
      type: "error",
      error: { type: "api_error", message: "Broke." },
    });
  });

  it("given a stream error, then it is a named `error` event with Anthropic's envelope, which the meter reads back", () => {
    const text = anthropicMessagesShape.streamErrorEvent("The provider's connection broke.", {
      type: "server_error",
      code: "upstream_reset",
    });
    expect(text).toBe(
      'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"The provider\'s connection broke."}}\n\n',
    );
    const meter = anthropicMessagesShape.streamMeter({
      model: "m",
      stream: true,
      messageCount: 1,
      systemPrompt: "",
      firstMessage: "",
      previousResponseId: undefined,
      maxOutputTokens: undefined,
      toolCount: 0,
    });
    for (const event of new SseParser().push(text)) meter.observe(event);
    expect(readProviderError(200, meter.errorEvent ?? "", [])).toEqual({
      type: "api_error",
      code: null,
      message: "The provider's connection broke.",
    });
  });
});
