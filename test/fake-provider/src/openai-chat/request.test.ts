import { describe, expect, it } from "vitest";
import { OpenAiError } from "../errors.js";
import { toChatRequest } from "./request.js";

function rejection(body: unknown): OpenAiError {
  try {
    toChatRequest(body);
  } catch (error) {
    if (error instanceof OpenAiError) return error;
    throw error;
  }
  throw new Error("the body was accepted");
}

describe("toChatRequest", () => {
  it("reads what the fake needs from a valid body", () => {
    const chat = toChatRequest({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 50,
      tools: [{ type: "function", function: { name: "search" } }],
    });
    expect(chat).toMatchObject({ model: "gpt-4o-mini", stream: true, includeUsage: true, maxTokens: 50 });
    expect([...chat.callableTools]).toEqual(["search"]);
  });

  it("prefers max_completion_tokens to max_tokens", () => {
    const messages = [{ role: "user", content: "hi" }];
    expect(toChatRequest({ model: "m", messages, max_tokens: 50, max_completion_tokens: 9 }).maxTokens).toBe(
      9,
    );
  });

  it.each([
    [[1], null, null],
    [{ messages: [] }, "model", null],
    [{ model: 4, messages: [] }, "model", "invalid_type"],
    [{ model: "m" }, "messages", "missing_required_parameter"],
    [{ model: "m", messages: "hi" }, "messages", "invalid_type"],
    [{ model: "m", messages: [] }, "messages", "empty_array"],
    [{ model: "m", messages: [{ content: "hi" }] }, "messages[0].role", "missing_required_parameter"],
    [{ model: "m", messages: [{ role: "user" }], max_tokens: 0 }, "max_tokens", "integer_below_min_value"],
    [{ model: "m", messages: [{ role: "user" }], stream: "yes" }, "stream", "invalid_type"],
    [{ model: "m", messages: [{ role: "user" }], tools: {} }, "tools", "invalid_type"],
  ])("rejects %j naming param %s", (body, param, code) => {
    expect(rejection(body)).toMatchObject({ status: 400, type: "invalid_request_error", param, code });
  });
});
