import { describe, expect, it } from "vitest";
import {
  AnthropicError,
  anthropicErrorBody,
  anthropicInjectedFailure,
  anthropicRateLimited,
  invalidRequest,
  OpenAiError,
  openAiErrorBody,
} from "./errors.js";

describe("AnthropicError", () => {
  it.each([
    [400, "invalid_request_error"],
    [401, "authentication_error"],
    [403, "permission_error"],
    [404, "not_found_error"],
    [413, "request_too_large"],
    [429, "rate_limit_error"],
    [500, "api_error"],
    [529, "overloaded_error"],
    [418, "invalid_request_error"],
    [502, "api_error"],
  ])("names status %s %s", (status, type) => {
    expect(new AnthropicError(status, "m").type).toBe(type);
  });

  it("writes Anthropic's envelope, the request id in the body of an answer, none in a stream event", () => {
    const error = new AnthropicError(529, "Overloaded");
    expect(JSON.parse(anthropicErrorBody(error, "req_1"))).toEqual({
      type: "error",
      error: { type: "overloaded_error", message: "Overloaded" },
      request_id: "req_1",
    });
    expect(error.body()).toEqual({
      type: "error",
      error: { type: "overloaded_error", message: "Overloaded" },
    });
    expect(error.retryable).toBe(true);
  });

  it("words an error from shared code, such as a bad x-fake header, in Anthropic's dialect", () => {
    const shared = invalidRequest("Invalid x-fake-fail 'x'.", "x-fake-fail");
    expect(JSON.parse(anthropicErrorBody(shared, "req_1")).error).toEqual({
      type: "invalid_request_error",
      message: "Invalid x-fake-fail 'x'.",
    });
  });
});

describe("openAiErrorBody", () => {
  it("writes OpenAI's envelope, translating an error from another dialect by its status", () => {
    expect(
      JSON.parse(openAiErrorBody(new OpenAiError(400, "bad", "invalid_request_error", "model"))),
    ).toEqual({
      error: { message: "bad", type: "invalid_request_error", param: "model", code: null },
    });
    expect(JSON.parse(openAiErrorBody(new AnthropicError(529, "Overloaded"))).error).toMatchObject({
      type: "server_error",
    });
  });
});

describe("Anthropic's refusals", () => {
  it("a rate limit names the bucket and the model, with retry-after in whole seconds unless waiting cannot help", () => {
    const refusal = {
      model: "claude-sonnet-4-5",
      kind: "output-tokens" as const,
      limit: 8000,
      used: 8000,
      requested: 10,
    };
    const error = anthropicRateLimited({ ...refusal, retryAfterMs: 1_200 });
    expect(error).toMatchObject({ status: 429, type: "rate_limit_error", headers: { "retry-after": "2" } });
    expect(error.message).toMatch(
      /rate limit of 8,000 output tokens per minute \(org: .*, model: claude-sonnet-4-5\)/,
    );
    expect(anthropicRateLimited({ ...refusal, retryAfterMs: Number.POSITIVE_INFINITY }).headers).toEqual({});
  });

  it("an injected failure is the error Anthropic sends for that status", () => {
    expect(anthropicInjectedFailure(529, "m")).toMatchObject({
      type: "overloaded_error",
      message: "Overloaded",
    });
    expect(anthropicInjectedFailure(404, "claude-x")).toMatchObject({
      type: "not_found_error",
      message: "model: claude-x",
    });
    expect(anthropicInjectedFailure(429, "m").headers).toEqual({ "retry-after": "1" });
  });
});
