import { isRecord, tokenCount } from "../json.js";
import { NO_USAGE, type UsageReport } from "../usage.js";

/** Reads a Chat Completions `usage` object; anything else reads as not reported. */
export function readChatUsage(usage: unknown): UsageReport {
  if (!isRecord(usage)) return NO_USAGE;
  const prompt = usage.prompt_tokens;
  const completion = usage.completion_tokens;
  if (typeof prompt !== "number" && typeof completion !== "number") return NO_USAGE;
  const details = usage.prompt_tokens_details;
  const completionDetails = usage.completion_tokens_details;
  return {
    reported: true,
    inputTokens: tokenCount(prompt),
    outputTokens: tokenCount(completion),
    cachedInputTokens: isRecord(details) ? tokenCount(details.cached_tokens) : 0,
    cacheWriteTokens: 0,
    reasoningTokens: isRecord(completionDetails) ? tokenCount(completionDetails.reasoning_tokens) : 0,
  };
}
