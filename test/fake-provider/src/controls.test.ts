import { describe, expect, it } from "vitest";
import { readControls } from "./controls.js";
import { OpenAiError } from "./errors.js";

describe("readControls", () => {
  it("reads no controls from ordinary headers", () => {
    expect(readControls({ authorization: "Bearer k" })).toEqual({
      latencyMs: undefined,
      chunkDelayMs: undefined,
      cachedTokens: undefined,
      pauseAfter: undefined,
      fault: undefined,
      usage: undefined,
      rateLimits: undefined,
    });
  });

  it("reads rate-limit headers to send, whatever they say", () => {
    expect(
      readControls({
        "x-fake-rate-limits":
          '{"x-ratelimit-limit-tokens": "18446744073709551616", "anthropic-ratelimit-tokens-reset": "NaN", "retry-after": "-5"}',
      }).rateLimits,
    ).toEqual({
      "x-ratelimit-limit-tokens": "18446744073709551616",
      "anthropic-ratelimit-tokens-reset": "NaN",
      "retry-after": "-5",
    });
  });

  it("reads usage members to report, whatever their values", () => {
    expect(
      readControls({ "x-fake-usage": '{"completion_tokens": 3.7, "prompt_tokens": "12", "x": null}' }).usage,
    ).toEqual({ completion_tokens: 3.7, prompt_tokens: "12", x: null });
    expect(readControls({ "x-fake-fail": "invalid-json" }).fault).toEqual({ kind: "invalid-json" });
  });

  it("reads numbers and each kind of fault", () => {
    expect(
      readControls({ "x-fake-latency-ms": "250", "x-fake-pause-after": "0", "x-fake-cached-tokens": "128" }),
    ).toMatchObject({ latencyMs: 250, pauseAfter: 0, cachedTokens: 128 });
    expect(readControls({ "x-fake-fail": "503" }).fault).toEqual({ kind: "status", status: 503 });
    expect(readControls({ "x-fake-fail": "reset" }).fault).toEqual({ kind: "reset" });
    expect(readControls({ "x-fake-fail": "Reset-After:2" }).fault).toEqual({ kind: "reset-after", after: 2 });
    expect(readControls({ "x-fake-fail": "hang" }).fault).toEqual({ kind: "hang" });
    expect(readControls({ "x-fake-fail": "error-after:3" }).fault).toEqual({
      kind: "error-after",
      after: 3,
      reset: false,
    });
    expect(readControls({ "x-fake-fail": "error-after:1:reset" }).fault).toEqual({
      kind: "error-after",
      after: 1,
      reset: true,
    });
  });

  it.each([
    ["x-fake-fail", "200"],
    ["x-fake-fail", "explode"],
    ["x-fake-latency-ms", "-5"],
    ["x-fake-chunk-delay-ms", "1.5"],
    ["x-fake-usage", "[1]"],
    ["x-fake-usage", "{prompt_tokens: 1}"],
    ["x-fake-rate-limits", '["x-ratelimit-limit-tokens"]'],
    ["x-fake-rate-limits", '{"content-type": "text/html"}'],
    ["x-fake-rate-limits", '{"x-ratelimit-limit-tokens": 5}'],
    ["x-fake-rate-limits", '{"retry-after": "1\\r\\nset-cookie: x"}'],
  ])("rejects %s: %s with a 400 that names the header", (name, value) => {
    let thrown: unknown;
    try {
      readControls({ [name]: value });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(OpenAiError);
    expect(thrown).toMatchObject({ status: 400, param: name, type: "invalid_request_error" });
  });
});
