import type { CallFeatures, Estimate, Need, RateLimitHeaderNames } from "@holdfast/predict";

// What a call takes of its key's window: before it is sent (its need and its floor) and
// after (what the provider counted). Pure: the estimate, the header names and the answer in.

/** Whether the key's provider keeps input and output tokens in windows of their own (Anthropic's). */
function splitTokens(names: RateLimitHeaderNames): boolean {
  return names.dimensions.inputTokens !== undefined || names.dimensions.outputTokens !== undefined;
}

/**
 * What a call takes from each dimension of its key's window: a request, its estimate plus
 * margin in tokens; where the input and output windows are apart (Anthropic's), they take
 * the input and the rest, and the combined "tokens" figure (the more restrictive of the
 * two) is not asked for the sum.
 */
export function needOf(estimate: Estimate, names: RateLimitHeaderNames): Need {
  return {
    requests: 1,
    tokens: splitTokens(names) ? 0 : estimate.need,
    inputTokens: estimate.input,
    outputTokens: Math.max(0, estimate.need - estimate.input),
  };
}

/** What a call takes for certain: its input, and its output cap when it sets one (its estimated output when not). */
export function floorOf(estimate: Estimate, features: CallFeatures, names: RateLimitHeaderNames): Need {
  const output = features.maxOutput ?? estimate.output;
  return {
    requests: 1,
    tokens: splitTokens(names) ? 0 : estimate.input + output,
    inputTokens: estimate.input,
    outputTokens: output,
  };
}

export const NOTHING: Need = Object.freeze({ requests: 0, tokens: 0, inputTokens: 0, outputTokens: 0 });

/** How a call ended, as far as what it took of its window goes. */
export interface Ended {
  readonly usage:
    | { reported: boolean; inputTokens: number; outputTokens: number; cachedInputTokens: number }
    | undefined;
  readonly status: number;
}

/**
 * What the provider counted of a call against its key's window, as far as the gateway can
 * tell: nothing for a refusal it answered before doing the work (a 429, a 4xx); for an
 * answer, a request, its input (Anthropic counts no cache reads) and its output cap (or
 * its output, when larger or uncapped): both providers take the cap when they admit a call,
 * and what they give back later, if anything, is left to the next readings. When no usage
 * came back (an error, a cut connection), what the call was sure to take.
 */
export function chargedOf(
  family: string,
  predicted: {
    readonly need: Need;
    readonly floor: Need;
    readonly features: Pick<CallFeatures, "maxOutput">;
  },
  ended: Ended,
): Need {
  const { status, usage } = ended;
  if (status === 429 || (status >= 400 && status < 500)) return NOTHING;
  if (usage?.reported !== true || status < 200 || status >= 300) return predicted.floor;
  const input =
    family === "anthropic" ? Math.max(0, usage.inputTokens - usage.cachedInputTokens) : usage.inputTokens;
  const output = Math.max(usage.outputTokens, predicted.features.maxOutput ?? 0);
  return {
    requests: 1,
    tokens: predicted.need.tokens > 0 ? input + output : 0,
    inputTokens: predicted.need.inputTokens > 0 ? input : 0,
    outputTokens: predicted.need.outputTokens > 0 ? output : 0,
  };
}
