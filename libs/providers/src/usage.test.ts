import { describe, expect, it } from "vitest";
import { readAnthropicUsage } from "./anthropic-messages/usage.js";
import { readChatUsage } from "./openai-chat/usage.js";
import { readResponsesUsage } from "./openai-responses/usage.js";
import { MAX_TOKENS_PER_CALL, NO_USAGE, UsageCheck } from "./usage.js";

/** One report of an input and an output count, as a provider sent them. */
function check(input: unknown, output: unknown) {
  const usage = new UsageCheck();
  return usage.report({
    inputTokens: usage.count("input_tokens", input, true),
    outputTokens: usage.count("output_tokens", output, true),
    cachedInputTokens: 0,
    cacheWriteTokens: 0,
    reasoningTokens: 0,
  });
}

describe("UsageCheck", () => {
  it("lets whole counts from 0 to the bound through as they are", () => {
    expect(check(0, MAX_TOKENS_PER_CALL)).toEqual({
      reported: true,
      inputTokens: 0,
      outputTokens: MAX_TOKENS_PER_CALL,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
      problem: undefined,
    });
  });

  it.each([
    [
      "2^53",
      2 ** 53,
      "output_tokens 9007199254740992 is more than 100000000, the most one call is taken to use",
    ],
    ["2^64", 2 ** 64, "output_tokens 18446744073709552000 is more than 100000000"],
    ["10^15", 1e15, "output_tokens 1000000000000000 is more than 100000000"],
    ["one past the bound", MAX_TOKENS_PER_CALL + 1, "output_tokens 100000001 is more than 100000000"],
    ["a number JSON reads as Infinity", JSON.parse("1e400"), "output_tokens Infinity is more than 100000000"],
    ["-5", -5, "output_tokens -5 is negative"],
    ["a negative fraction", -0.5, "output_tokens -0.5 is negative"],
    ['"12"', "12", "output_tokens is a string, not a number"],
    ["null", null, "output_tokens is missing"],
    ["absent", undefined, "output_tokens is missing"],
    ["true", true, "output_tokens is a boolean, not a number"],
    ["a list", [12], "output_tokens is a list, not a number"],
    ["an object", { n: 12 }, "output_tokens is an object, not a number"],
  ])(
    "makes a report with an output count of %s unusable: not reported, zeros, and why",
    (_case, output, why) => {
      const report = check(1_000, output);
      expect(report).toEqual({ ...NO_USAGE, problem: expect.stringContaining(why) });
    },
  );

  it("rounds a fraction, and says so, the report still usable", () => {
    expect(check(10.5, 3.7)).toEqual({
      reported: true,
      inputTokens: 11,
      outputTokens: 4,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
      problem:
        "input_tokens 10.5 is not a whole number: rounded to 11; output_tokens 3.7 is not a whole number: rounded to 4",
    });
  });

  it("reads an optional count left out (or null) as 0, and a bad one as unusable", () => {
    const usage = new UsageCheck();
    expect(usage.count("cached_tokens", undefined)).toBe(0);
    expect(usage.count("cached_tokens", null)).toBe(0);
    expect(usage.report({ ...NO_USAGE, inputTokens: 5 }).reported).toBe(true);
    const bad = new UsageCheck();
    bad.count("cached_tokens", -1);
    expect(bad.report({ ...NO_USAGE, inputTokens: 5 })).toMatchObject({
      reported: false,
      inputTokens: 0,
      problem: "cached_tokens -1 is negative",
    });
  });

  it("says every problem, not only the first, within a bound", () => {
    const report = check(-1, "x");
    expect(report.problem).toBe("input_tokens -1 is negative; output_tokens is a string, not a number");
    const many = new UsageCheck();
    for (let i = 0; i < 100; i++) many.count(`count_${i}`, -1);
    expect(many.report({ ...NO_USAGE }).problem!.length).toBeLessThan(600);
  });

  it("makes a report whose cached and cache-written tokens are more than its input unusable", () => {
    const usage = new UsageCheck();
    expect(
      usage.report({
        inputTokens: 10,
        outputTokens: 1,
        cachedInputTokens: 8,
        cacheWriteTokens: 3,
        reasoningTokens: 0,
      }),
    ).toEqual({
      ...NO_USAGE,
      problem: "cached and cache-written tokens (8 + 3) are more than the input (10)",
    });
  });
});

// The same values, as each API shape's reader meets them in the output count it reports.
describe.each([
  ["Chat Completions", readChatUsage, { prompt_tokens: 40 }, "completion_tokens"],
  ["Responses", readResponsesUsage, { input_tokens: 40 }, "output_tokens"],
  ["Anthropic Messages", readAnthropicUsage, { input_tokens: 40 }, "output_tokens"],
] as const)("%s usage", (_shape, read, input, output) => {
  it.each([2 ** 53, 2 ** 64, 1e15, -5, "12", null])(
    "with %j output tokens is not reported, and says why",
    (value) => {
      const report = read({ ...input, [output]: value });
      expect(report).toMatchObject({ reported: false, inputTokens: 0, outputTokens: 0 });
      expect(report.problem).toMatch(new RegExp(`^${output} `));
    },
  );

  it("with 3.7 output tokens is reported rounded, and says so", () => {
    expect(read({ ...input, [output]: 3.7 })).toMatchObject({
      reported: true,
      inputTokens: 40,
      outputTokens: 4,
      problem: `${output} 3.7 is not a whole number: rounded to 4`,
    });
  });
});
