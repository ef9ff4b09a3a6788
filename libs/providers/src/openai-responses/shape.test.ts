import { describe, expect, it } from "vitest";
import { SseParser } from "../sse.js";
import { openAIResponsesShape } from "./shape.js";

describe("openAIResponsesShape", () => {
  it("given a streamed request, then the client's body goes upstream unchanged", () => {
    const body = { model: "gpt-4.1", stream: true, input: "hi" };
    const read = openAIResponsesShape.readRequest(body);
    if (!read.ok) throw new Error(read.error.message);
    expect(
      openAIResponsesShape.upstreamBody(body, read.request, Buffer.from(JSON.stringify(body))),
    ).toBeUndefined();
  });

  it("given a refusal, then the error body is OpenAI's with its param", () => {
    expect(openAIResponsesShape.errorBody("'input' must be a string.", { param: "input" })).toEqual({
      error: {
        message: "'input' must be a string.",
        type: "invalid_request_error",
        param: "input",
        code: null,
      },
    });
  });

  it("given a stream error, then it is an `error` event carrying the error nested, as the SDK raises it, and flat, as documented", () => {
    const text = openAIResponsesShape.streamErrorEvent("The provider's connection broke.", {
      type: "server_error",
      code: "upstream_reset",
    });
    const [event, ...rest] = new SseParser().push(text);
    expect(rest).toEqual([]);
    expect(event?.raw).toBe(text);
    expect(event?.event).toBe("error");
    expect(JSON.parse(event?.data ?? "")).toEqual({
      type: "error",
      sequence_number: 0,
      code: "upstream_reset",
      message: "The provider's connection broke.",
      param: null,
      error: {
        type: "server_error",
        code: "upstream_reset",
        message: "The provider's connection broke.",
        param: null,
      },
    });
  });

  it("given the provider's events the client has, then the error takes the number after the last of them", () => {
    const sent = new SseParser().push(
      'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n' +
        ": a keepalive\n\n" +
        'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":41}\n\n',
    );
    const numbered = (last: (typeof sent)[number] | undefined, events: number) =>
      JSON.parse(
        new SseParser().push(openAIResponsesShape.streamErrorEvent("Denied.", {}, { events, last }))[0]
          ?.data ?? "",
      ).sequence_number;
    expect(numbered(sent[2], 2)).toBe(42);
    expect(numbered(undefined, 0)).toBe(0);
    // A provider that does not number its events: the count of those the client has.
    const plain = new SseParser().push('data: {"type":"response.output_text.delta"}\n\n')[0];
    expect(numbered(plain, 5)).toBe(5);
  });

  it("given the gateway's own stream error, then its meter reads it back as the provider's error", () => {
    const meter = openAIResponsesShape.streamMeter({
      model: "m",
      stream: true,
      messageCount: 1,
      systemPrompt: "",
      firstMessage: "",
      previousResponseId: undefined,
      maxOutputTokens: undefined,
      toolCount: 0,
    });
    const text = openAIResponsesShape.streamErrorEvent("Run stopped.", {
      type: "suspended",
      code: "run_stopped",
    });
    for (const event of new SseParser().push(text)) meter.observe(event);
    expect(meter.errorEvent).toBe(text.slice("event: error\ndata: ".length, -2));
  });
});
