import { describe, expect, it } from "vitest";
import { AnthropicError } from "../errors.js";
import { toMessagesRequest } from "./request.js";

const tool = { name: "get_weather", description: "d", input_schema: { type: "object" } };

function read(body: Record<string, unknown>, countOnly = false) {
  return toMessagesRequest({ model: "claude-sonnet-4-5", max_tokens: 100, ...body }, { countOnly });
}

function rejection(body: unknown, countOnly = false): AnthropicError {
  try {
    toMessagesRequest(body, { countOnly });
  } catch (error) {
    if (error instanceof AnthropicError) return error;
    throw error;
  }
  throw new Error("the body was accepted");
}

describe("toMessagesRequest", () => {
  it("reads the system prompt and messages as chat turns, tool results as role tool", () => {
    const request = read({
      system: [{ type: "text", text: "Be brief." }],
      tools: [tool],
      messages: [
        { role: "user", content: "Weather?" },
        {
          role: "assistant",
          content: [
            { type: "text", text: "Checking." },
            { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
          ],
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "Sunny" }] },
            { type: "text", text: "Thanks" },
          ],
        },
      ],
    });
    expect(request.messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: "Checking.",
        tool_calls: [
          {
            id: "toolu_1",
            type: "function",
            function: { name: "get_weather", arguments: '{"city":"Paris"}' },
          },
        ],
      },
      { role: "tool", tool_call_id: "toolu_1", content: "Sunny" },
      { role: "user", content: "Thanks" },
    ]);
    expect(request).toMatchObject({ model: "claude-sonnet-4-5", stream: false, maxTokens: 100 });
    expect([...request.callableTools]).toEqual(["get_weather"]);
  });

  it("counts the prompt segment by segment: 2, each tool's JSON, the system text, 4 per message and its blocks", () => {
    const request = read({
      system: "Be brief.",
      tools: [tool],
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "Hello" },
            { type: "image", source: {} },
          ],
        },
      ],
    });
    expect(request.segments.map((segment) => segment.tokens)).toEqual([
      2,
      Math.ceil(JSON.stringify(tool).length / 4),
      3,
      4 + 2,
      0,
    ]);
    expect(request.segments.every((segment) => !segment.breakpoint)).toBe(true);
  });

  it("marks the blocks that carry cache_control, and takes the last one's ttl", () => {
    const request = read({
      tools: [{ ...tool, cache_control: { type: "ephemeral" } }],
      system: [{ type: "text", text: "Rules", cache_control: { type: "ephemeral" } }],
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: "Hi", cache_control: { type: "ephemeral", ttl: "1h" } }],
        },
      ],
    });
    expect(request.segments.map((segment) => segment.breakpoint)).toEqual([false, true, true, true]);
    expect(request.cacheTtl).toBe("1h");
    expect(read({ messages: [{ role: "user", content: "Hi" }] }).cacheTtl).toBe("5m");
  });

  it("lets the model call no tool with tool_choice none, and only the named one with tool_choice tool", () => {
    const tools = [tool, { ...tool, name: "other" }, { type: "web_search_20250305", name: "web_search" }];
    const messages = [{ role: "user", content: "x" }];
    expect([...read({ tools, messages }).callableTools]).toEqual(["get_weather", "other"]);
    expect(read({ tools, messages, tool_choice: { type: "none" } }).callableTools.size).toBe(0);
    expect([
      ...read({ tools, messages, tool_choice: { type: "tool", name: "other" } }).callableTools,
    ]).toEqual(["other"]);
  });

  it("for count_tokens, needs no max_tokens and never streams", () => {
    const request = toMessagesRequest(
      { model: "m", stream: true, messages: [{ role: "user", content: "x" }] },
      { countOnly: true },
    );
    expect(request).toMatchObject({ maxTokens: undefined, stream: false });
  });

  it.each([
    [{ max_tokens: 1, messages: [] }, "model: Field required"],
    [{ model: "m", messages: [] }, "max_tokens: Field required"],
    [{ model: "m", max_tokens: 1.5, messages: [] }, "max_tokens: Input should be a valid integer"],
    [{ model: "m", max_tokens: 0, messages: [] }, "max_tokens: Input should be greater than or equal to 1"],
    [{ model: "m", max_tokens: 1 }, "messages: Field required"],
    [
      { model: "m", max_tokens: 1, messages: [{ role: "system", content: "x" }] },
      "messages.0.role: Input should be 'user' or 'assistant'",
    ],
    [{ model: "m", max_tokens: 1, messages: [{ role: "user" }] }, "messages.0.content: Field required"],
    [
      { model: "m", max_tokens: 1, messages: [{ role: "user", content: [{ text: "x" }] }] },
      "messages.0.content.0.type: Field required",
    ],
    [{ model: "m", max_tokens: 1, messages: [], stream: "yes" }, "stream: Input should be a valid boolean"],
    [
      { model: "m", max_tokens: 1, messages: [], tools: [{ name: "t" }] },
      "tools.0.input_schema: Field required",
    ],
    [
      { model: "m", max_tokens: 1, messages: [], metadata: { user_id: 4 } },
      "metadata.user_id: Input should be a valid string",
    ],
  ])("rejects %j: %s", (body, message) => {
    expect(rejection(body)).toMatchObject({ status: 400, type: "invalid_request_error", message });
  });
});
