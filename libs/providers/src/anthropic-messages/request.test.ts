import { describe, expect, it } from "vitest";
import { readAnthropicRequest } from "./request.js";

describe("readAnthropicRequest", () => {
  it("given a streamed request with system blocks and a tool loop, then it reads what the gateway needs", () => {
    const result = readAnthropicRequest({
      model: "claude-sonnet-4-5",
      max_tokens: 1024,
      stream: true,
      metadata: { user_id: "user-7f3a" },
      system: [
        { type: "text", text: "You are terse." },
        { type: "text", text: "Use tools.", cache_control: { type: "ephemeral" } },
      ],
      messages: [
        { role: "user", content: "What's the weather in Paris?" },
        {
          role: "assistant",
          content: [{ type: "tool_use", id: "toolu_01", name: "get_weather", input: { city: "Paris" } }],
        },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: "18C" }] },
      ],
    });
    expect(result).toEqual({
      ok: true,
      request: {
        model: "claude-sonnet-4-5",
        stream: true,
        messageCount: 3,
        systemPrompt: "You are terse.\nUse tools.",
        firstMessage: "What's the weather in Paris?",
        previousResponseId: undefined,
        maxOutputTokens: 1024,
        toolCount: 0,
        metadata: { user_id: "user-7f3a" },
      },
    });
  });

  it("given a system string and no stream or metadata, then the defaults are off and empty", () => {
    const result = readAnthropicRequest({
      model: "claude-3-5-haiku-20241022",
      max_tokens: 256,
      system: "Be brief.",
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(result).toEqual({
      ok: true,
      request: {
        model: "claude-3-5-haiku-20241022",
        stream: false,
        messageCount: 1,
        systemPrompt: "Be brief.",
        firstMessage: "Hi",
        previousResponseId: undefined,
        maxOutputTokens: 256,
        toolCount: 0,
        metadata: undefined,
      },
    });
  });

  it("given system turns among the messages, then they join the system prompt and the first message is the user's", () => {
    const result = readAnthropicRequest({
      model: "m",
      system: "Top.",
      messages: [
        { role: "system", content: [{ type: "text", text: "Inline." }] },
        { role: "user", content: "Hello" },
      ],
    });
    expect(result).toMatchObject({
      ok: true,
      request: { systemPrompt: "Top.\n\nInline.", firstMessage: "Hello", messageCount: 2 },
    });
  });

  it("given blocks that are not text, then each stands in as its JSON, the same every time", () => {
    const image = {
      type: "image",
      source: { type: "url", url: "https://example.com/cat.png" },
    };
    const body = {
      model: "m",
      messages: [{ role: "user", content: [image, { type: "text", text: "Describe." }] }],
    };
    const first = readAnthropicRequest(body);
    expect(first.ok && first.request.firstMessage).toBe(`${JSON.stringify(image)}\nDescribe.`);
    expect(readAnthropicRequest(structuredClone(body))).toEqual(first);
  });

  it.each([
    ["a string body", "hello", null],
    ["null", null, null],
    ["a missing model", { messages: [] }, "model"],
    ["an empty model", { model: "", messages: [] }, "model"],
    ["missing messages", { model: "m" }, "messages"],
    ["messages as an object", { model: "m", messages: {} }, "messages"],
    ["a string stream flag", { model: "m", stream: "true", messages: [] }, "stream"],
    ["metadata as a string", { model: "m", metadata: "u1", messages: [] }, "metadata"],
    ["system as a number", { model: "m", system: 1, messages: [] }, "system"],
    [
      "a message that is a string",
      { model: "m", messages: [{ role: "user", content: "" }, "hi"] },
      "messages.1",
    ],
    ["a message without a role", { model: "m", messages: [{ content: "hi" }] }, "messages.0.role"],
    ["a message without content", { model: "m", messages: [{ role: "user" }] }, "messages.0.content"],
    [
      "content as an object",
      { model: "m", messages: [{ role: "user", content: { text: "x" } }] },
      "messages.0.content",
    ],
  ])("given %s, then it is refused and the message names the field", (_case, body, param) => {
    const result = readAnthropicRequest(body);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.param).toBe(param);
    expect(result.error.message.length).toBeGreaterThan(0);
    if (param !== null) expect(result.error.message).toContain(`'${param}'`);
  });
});
