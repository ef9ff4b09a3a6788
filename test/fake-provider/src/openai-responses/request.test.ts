import { describe, expect, it } from "vitest";
import { OpenAiError } from "../errors.js";
import { toResponsesRequest } from "./request.js";

function rejection(body: unknown): OpenAiError {
  try {
    toResponsesRequest(body);
  } catch (error) {
    if (error instanceof OpenAiError) return error;
    throw error;
  }
  throw new Error("the body was accepted");
}

describe("toResponsesRequest", () => {
  it("reads instructions and a string input as chat turns, with OpenAI's defaults for the rest", () => {
    const request = toResponsesRequest({ model: "gpt-4o-mini", instructions: "Be brief.", input: "hi" });
    expect(request).toMatchObject({
      model: "gpt-4o-mini",
      stream: false,
      instructions: "Be brief.",
      messages: [
        { role: "developer", content: "Be brief." },
        { role: "user", content: "hi" },
      ],
      maxTokens: undefined,
      tools: [],
      previousResponseId: null,
      store: true,
      settings: {
        max_output_tokens: null,
        metadata: {},
        parallel_tool_calls: true,
        temperature: 1,
        tool_choice: "auto",
        top_p: 1,
        truncation: "disabled",
        user: null,
      },
    });
  });

  it("reads input items: messages with content parts, function calls and their outputs", () => {
    const request = toResponsesRequest({
      model: "m",
      input: [
        {
          role: "user",
          content: [
            { type: "input_text", text: "one" },
            { type: "input_image", image_url: "x" },
          ],
        },
        {
          type: "message",
          role: "assistant",
          content: [{ type: "output_text", text: "two", annotations: [] }],
        },
        { type: "function_call", call_id: "call_1", name: "f", arguments: '{"a":1}' },
        { type: "function_call_output", call_id: "call_1", output: "done" },
        { type: "reasoning", summary: [] },
      ],
    });
    expect(request.messages).toEqual([
      { role: "user", content: "one" },
      { role: "assistant", content: "two" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: '{"a":1}' } }],
      },
      { role: "tool", tool_call_id: "call_1", content: "done" },
      { role: "reasoning", content: "" },
    ]);
  });

  it("echoes function tools with defaults filled in, callable unless tool_choice is none", () => {
    const tools = [
      { type: "function", name: "search", parameters: { type: "object" } },
      { type: "web_search" },
    ];
    const request = toResponsesRequest({
      model: "m",
      input: "x",
      tools,
      max_output_tokens: 64,
      store: false,
    });
    expect(request.tools).toEqual([
      { type: "function", description: null, name: "search", parameters: { type: "object" }, strict: true },
      { type: "web_search" },
    ]);
    expect([...request.callableTools]).toEqual(["search"]);
    expect(request).toMatchObject({ maxTokens: 64, store: false });
    expect(
      toResponsesRequest({ model: "m", input: "x", tools, tool_choice: "none" }).callableTools.size,
    ).toBe(0);
  });

  it("takes no input when it goes on from a previous response", () => {
    expect(toResponsesRequest({ model: "m", previous_response_id: "resp_1" })).toMatchObject({
      messages: [],
      previousResponseId: "resp_1",
    });
  });

  it.each([
    [[1], null, null],
    [{ input: "x" }, "model", "missing_required_parameter"],
    [{ model: 4, input: "x" }, "model", "invalid_type"],
    [{ model: "m" }, "input", "missing_required_parameter"],
    [{ model: "m", input: 4 }, "input", "invalid_type"],
    [{ model: "m", input: ["x"] }, "input[0]", "invalid_type"],
    [{ model: "m", input: [{ content: "x" }] }, "input[0].role", "missing_required_parameter"],
    [{ model: "m", input: [{ role: "bot", content: "x" }] }, "input[0].role", "invalid_value"],
    [
      { model: "m", input: [{ type: "function_call_output", call_id: "c" }] },
      "input[0].output",
      "missing_required_parameter",
    ],
    [{ model: "m", input: "x", max_output_tokens: 15 }, "max_output_tokens", "integer_below_min_value"],
    [
      { model: "m", input: "x", tools: [{ type: "function" }] },
      "tools[0].name",
      "missing_required_parameter",
    ],
    [{ model: "m", input: "x", stream: "yes" }, "stream", "invalid_type"],
    [{ model: "m", input: "x", metadata: [] }, "metadata", "invalid_type"],
    [{ model: "m", input: "x", previous_response_id: 1 }, "previous_response_id", "invalid_type"],
  ])("rejects %j naming param %s", (body, param, code) => {
    expect(rejection(body)).toMatchObject({ status: 400, type: "invalid_request_error", param, code });
  });
});
