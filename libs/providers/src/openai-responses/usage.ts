import { isRecord } from "../json.js";
import { NO_USAGE, UsageCheck, type UsageReport } from "../usage.js";

/**
 * Reads a Responses API `usage` object, each count checked (UsageCheck). Its `input_tokens`
 * already counts the cached ones and its `output_tokens` the reasoning ones, as
 * `UsageReport` does; anything that is not one, or one that says nothing of input or
 * output, reads as not reported.
 */
export function readResponsesUsage(usage: unknown): UsageReport {
  if (!isRecord(usage)) return NO_USAGE;
  const input = usage.input_tokens;
  const output = usage.output_tokens;
  if (input == null && output == null) return NO_USAGE;
  const inputDetails = usage.input_tokens_details;
  const outputDetails = usage.output_tokens_details;
  const check = new UsageCheck();
  return check.report({
    inputTokens: check.count("input_tokens", input, true),
    outputTokens: check.count("output_tokens", output, true),
    cachedInputTokens: isRecord(inputDetails)
      ? check.count("input_tokens_details.cached_tokens", inputDetails.cached_tokens)
      : 0,
    cacheWriteTokens: 0,
    reasoningTokens: isRecord(outputDetails)
      ? check.count("output_tokens_details.reasoning_tokens", outputDetails.reasoning_tokens)
      : 0,
  });
}
