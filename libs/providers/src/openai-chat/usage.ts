import { isRecord } from "../json.js";
import { NO_USAGE, UsageCheck, type UsageReport } from "../usage.js";

/**
 * Reads a Chat Completions `usage` object, each count checked (UsageCheck); anything that
 * is not one, or one that says nothing of the prompt or the completion, reads as not reported.
 */
export function readChatUsage(usage: unknown): UsageReport {
  if (!isRecord(usage)) return NO_USAGE;
  const prompt = usage.prompt_tokens;
  const completion = usage.completion_tokens;
  if (prompt == null && completion == null) return NO_USAGE;
  const details = usage.prompt_tokens_details;
  const completionDetails = usage.completion_tokens_details;
  const check = new UsageCheck();
  return check.report({
    inputTokens: check.count("prompt_tokens", prompt, true),
    outputTokens: check.count("completion_tokens", completion, true),
    cachedInputTokens: isRecord(details)
      ? check.count("prompt_tokens_details.cached_tokens", details.cached_tokens)
      : 0,
    cacheWriteTokens: 0,
    reasoningTokens: isRecord(completionDetails)
      ? check.count("completion_tokens_details.reasoning_tokens", completionDetails.reasoning_tokens)
      : 0,
  });
}
