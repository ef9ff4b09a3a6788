import { describe, expect, it } from "vitest";
import { renamedBody, renamedEvent } from "./rename.js";

describe("an answer renamed to the alias the agent asked for", () => {
  it("renames the model of a body, and nothing a tool's arguments say", () => {
    const body = Buffer.from(
      JSON.stringify({
        model: "gpt-4o-mini-2024-07-18",
        content: [{ type: "tool_use", input: { model: "keep-me" } }],
      }),
    );
    expect(JSON.parse(renamedBody(body, "fast").toString())).toEqual({
      model: "fast",
      content: [{ type: "tool_use", input: { model: "keep-me" } }],
    });
    expect(renamedBody(Buffer.from("not json"), "fast").toString()).toBe("not json");
  });

  it("renames each shape's stream events where they name the model", () => {
    const chat = 'data: {"id":"c1","model":"gpt-4o-2024-08-06","choices":[]}\n\n';
    expect(renamedEvent(chat, "fast")).toBe('data: {"id":"c1","model":"fast","choices":[]}\n\n');
    const responses =
      'event: response.created\ndata: {"type":"response.created","response":{"id":"r1","model":"gpt-4o"}}\n\n';
    expect(renamedEvent(responses, "fast")).toBe(
      'event: response.created\ndata: {"type":"response.created","response":{"id":"r1","model":"fast"}}\n\n',
    );
    const anthropic =
      'event: message_start\r\ndata: {"type":"message_start","message":{"model":"claude-3-5-haiku"}}\r\n\r\n';
    expect(renamedEvent(anthropic, "fast")).toBe(
      'event: message_start\r\ndata: {"type":"message_start","message":{"model":"fast"}}\r\n\r\n',
    );
    // A delta whose text mentions a model is left as it is.
    const delta = 'data: {"type":"content_block_delta","delta":{"text":"the \\"model\\" field"}}\n\n';
    expect(renamedEvent(delta, "fast")).toBe(delta);
    expect(renamedEvent("data: [DONE]\n\n", "fast")).toBe("data: [DONE]\n\n");
  });
});
