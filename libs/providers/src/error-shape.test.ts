import { describe, expect, it } from "vitest";
import { openAIErrorBody, readProviderError } from "./error-shape.js";

describe("openAIErrorBody", () => {
  it("given only a message, then type, param and code take OpenAI's defaults", () => {
    expect(openAIErrorBody("'model' must be a non-empty string.")).toEqual({
      error: {
        message: "'model' must be a non-empty string.",
        type: "invalid_request_error",
        param: null,
        code: null,
      },
    });
  });

  it("given every field, then each is used", () => {
    expect(
      openAIErrorBody("Run stopped.", { type: "suspended", param: "model", code: "run_stopped" }),
    ).toEqual({
      error: { message: "Run stopped.", type: "suspended", param: "model", code: "run_stopped" },
    });
  });
});

describe("readProviderError", () => {
  it("given OpenAI's 401 with a masked key echo, then type and code are read and the key fragment is gone", () => {
    const body = JSON.stringify({
      error: {
        message:
          "Incorrect API key provided: sk-bad***...1234. You can find your API key at https://platform.openai.com/account/api-keys.",
        type: "invalid_request_error",
        param: null,
        code: "invalid_api_key",
      },
    });
    const error = readProviderError(401, body, []);
    expect(error.type).toBe("invalid_request_error");
    expect(error.code).toBe("invalid_api_key");
    expect(error.message).toContain("Incorrect API key provided: [redacted].");
    expect(error.message).not.toMatch(/sk-|1234/);
  });

  it("given Anthropic's error shape, then its inner type and message are read", () => {
    const body = JSON.stringify({
      type: "error",
      error: { type: "overloaded_error", message: "Overloaded" },
      request_id: "req_011",
    });
    expect(readProviderError(529, body, [])).toEqual({
      type: "overloaded_error",
      code: null,
      message: "Overloaded",
    });
  });

  it("given Anthropic's error event inside a 200 stream, then its inner type and message are read", () => {
    const data = JSON.stringify({
      type: "error",
      error: { details: null, type: "overloaded_error", message: "Overloaded" },
      request_id: "req_011CSHoEeqs5C35K2UUqR7Fy",
    });
    expect(readProviderError(200, data, [])).toEqual({
      type: "overloaded_error",
      code: null,
      message: "Overloaded",
    });
  });

  it("given the Responses API's error event as it is sent, nested, then the inner error is read", () => {
    const data = JSON.stringify({
      type: "error",
      sequence_number: 2,
      error: {
        type: "tokens",
        code: "rate_limit_exceeded",
        message: "Rate limit reached for gpt-4.1 on tokens per min (TPM): Limit 30000, Used 25265.",
        param: null,
      },
    });
    expect(readProviderError(200, data, [])).toEqual({
      type: "tokens",
      code: "rate_limit_exceeded",
      message: "Rate limit reached for gpt-4.1 on tokens per min (TPM): Limit 30000, Used 25265.",
    });
  });

  it("given the Responses API's error event as documented, flat, then `type: error` is not taken for the error's type", () => {
    const data = JSON.stringify({
      type: "error",
      code: "server_error",
      message: "The server had an error while processing your request.",
      param: null,
      sequence_number: 7,
    });
    expect(readProviderError(200, data, [])).toEqual({
      type: "api_error",
      code: "server_error",
      message: "The server had an error while processing your request.",
    });
  });

  it("given an error without a type inside a 200 stream, then it is the provider's, not the request's", () => {
    expect(readProviderError(200, JSON.stringify({ error: { message: "boom" } }), [])).toEqual({
      type: "api_error",
      code: null,
      message: "boom",
    });
  });

  it("given Google's error in an array, then status is the type and the numeric code a string", () => {
    const body = JSON.stringify([
      { error: { code: 400, message: "API key not valid.", status: "INVALID_ARGUMENT" } },
    ]);
    expect(readProviderError(400, body, [])).toEqual({
      type: "INVALID_ARGUMENT",
      code: "400",
      message: "API key not valid.",
    });
  });

  it("given Mistral's top-level error, then it is read", () => {
    const body = JSON.stringify({
      object: "error",
      message: "Invalid model: x",
      type: "invalid_model",
      code: "1500",
    });
    expect(readProviderError(400, body, [])).toEqual({
      type: "invalid_model",
      code: "1500",
      message: "Invalid model: x",
    });
  });

  it("given an HTML page from a load balancer, then the HTTP status speaks instead", () => {
    expect(readProviderError(502, "<html><body>Bad gateway</body></html>", [])).toEqual({
      type: "api_error",
      code: null,
      message: "502 Bad Gateway",
    });
    expect(readProviderError(429, "", [])).toEqual({
      type: "rate_limit_error",
      code: null,
      message: "429 Too Many Requests",
    });
  });

  it("given a message echoing the configured key, then the key is scrubbed", () => {
    const key = "upstream-key-0f1e2d3c4b5a";
    const body = JSON.stringify({ error: { message: `key ${key} has no access`, type: "permission_error" } });
    expect(readProviderError(403, body, [key]).message).toBe("key [redacted] has no access");
  });

  it("given a configured key across the 500-character cut, then no part of it survives the truncation", () => {
    const key = "upstream-key-ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ";
    const message = `${"x".repeat(480)} ${key} ${"y".repeat(200)}`;
    const body = JSON.stringify({ error: { message, type: "invalid_request_error" } });
    const error = readProviderError(400, body, [key]);
    expect(error.message.length).toBeLessThanOrEqual(500);
    expect(error.message).toContain("[redacted]");
    expect(error.message).not.toContain("upstream-key");
  });

  it("given a message cut inside an emoji, then no half surrogate is left", () => {
    const message = `${"x".repeat(499)}😀`;
    const error = readProviderError(400, JSON.stringify({ error: { message } }), []);
    expect(error.message).toBe("x".repeat(499));
  });
});
