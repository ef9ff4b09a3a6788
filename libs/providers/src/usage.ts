/**
 * Token usage of one model call, the same shape whichever provider reported it.
 * `reported: false` means the provider said nothing, which is not the same as zero.
 */
export interface UsageReport {
  readonly reported: boolean;
  /** Every prompt token, cached ones included. */
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** The part of `inputTokens` served from the provider's prompt cache. */
  readonly cachedInputTokens: number;
  /** The part of `inputTokens` written to the provider's prompt cache (Anthropic bills it apart). */
  readonly cacheWriteTokens: number;
  /** The part of `outputTokens` the model spent reasoning. */
  readonly reasoningTokens: number;
}

export const NO_USAGE: UsageReport = Object.freeze({
  reported: false,
  inputTokens: 0,
  outputTokens: 0,
  cachedInputTokens: 0,
  cacheWriteTokens: 0,
  reasoningTokens: 0,
});
