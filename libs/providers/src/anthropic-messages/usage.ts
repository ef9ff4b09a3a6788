import { isRecord } from "../json.js";
import { NO_USAGE, UsageCheck, type UsageReport } from "../usage.js";

/**
 * Reads an Anthropic `usage` object, each count checked (UsageCheck). Anthropic's
 * `input_tokens` leaves out the tokens read from and written to the prompt cache;
 * `UsageReport.inputTokens` counts every prompt token, so the three are added. Thinking
 * tokens are part of `output_tokens`.
 */
export function readAnthropicUsage(usage: unknown): UsageReport {
  if (!isRecord(usage)) return NO_USAGE;
  const input = usage.input_tokens;
  const output = usage.output_tokens;
  if (input == null && output == null) return NO_USAGE;
  const check = new UsageCheck();
  const cacheRead = check.count("cache_read_input_tokens", usage.cache_read_input_tokens);
  const cacheWrite = check.count("cache_creation_input_tokens", usage.cache_creation_input_tokens);
  const outputDetails = usage.output_tokens_details;
  return check.report({
    inputTokens: check.count("input_tokens", input, true) + cacheRead + cacheWrite,
    outputTokens: check.count("output_tokens", output, true),
    cachedInputTokens: cacheRead,
    cacheWriteTokens: cacheWrite,
    reasoningTokens: isRecord(outputDetails)
      ? check.count("output_tokens_details.thinking_tokens", outputDetails.thinking_tokens)
      : 0,
  });
}
