import { isRecord, tokenCount } from "../json.js";
import { NO_USAGE, type UsageReport } from "../usage.js";

/**
 * Reads an Anthropic `usage` object. Anthropic's `input_tokens` leaves out the tokens
 * read from and written to the prompt cache; `UsageReport.inputTokens` counts every
 * prompt token, so the three are added. Thinking tokens are part of `output_tokens`.
 */
export function readAnthropicUsage(usage: unknown): UsageReport {
  if (!isRecord(usage)) return NO_USAGE;
  const input = usage.input_tokens;
  const output = usage.output_tokens;
  if (typeof input !== "number" && typeof output !== "number") return NO_USAGE;
  const cacheRead = tokenCount(usage.cache_read_input_tokens);
  const cacheWrite = tokenCount(usage.cache_creation_input_tokens);
  const outputDetails = usage.output_tokens_details;
  return {
    reported: true,
    inputTokens: tokenCount(input) + cacheRead + cacheWrite,
    outputTokens: tokenCount(output),
    cachedInputTokens: cacheRead,
    cacheWriteTokens: cacheWrite,
    reasoningTokens: isRecord(outputDetails) ? tokenCount(outputDetails.thinking_tokens) : 0,
  };
}
