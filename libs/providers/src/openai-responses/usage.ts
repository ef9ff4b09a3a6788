import { isRecord, tokenCount } from "../json.js";
import { NO_USAGE, type UsageReport } from "../usage.js";

/**
 * Reads a Responses API `usage` object. Its `input_tokens` already counts the cached
 * ones and its `output_tokens` the reasoning ones, as `UsageReport` does; anything else
 * reads as not reported.
 */
export function readResponsesUsage(usage: unknown): UsageReport {
  if (!isRecord(usage)) return NO_USAGE;
  const input = usage.input_tokens;
  const output = usage.output_tokens;
  if (typeof input !== "number" && typeof output !== "number") return NO_USAGE;
  const inputDetails = usage.input_tokens_details;
  const outputDetails = usage.output_tokens_details;
  return {
    reported: true,
    inputTokens: tokenCount(input),
    outputTokens: tokenCount(output),
    cachedInputTokens: isRecord(inputDetails) ? tokenCount(inputDetails.cached_tokens) : 0,
    cacheWriteTokens: 0,
    reasoningTokens: isRecord(outputDetails) ? tokenCount(outputDetails.reasoning_tokens) : 0,
  };
}
