import type { Dimension, Figures } from "@holdfast/predict";
import type { PredictAction, Prediction } from "@holdfast/proto";
import { type GatewayError, RateLimitWaitExceededError, TooLargeForRateLimitError } from "../errors.js";
import type { Call, Verdict } from "../pipeline/hooks.js";
import type { Predicted } from "./estimate.js";

// What prediction tells the pipeline and the log: its refusals, and the figures a call's
// StepStarted (or its checkpoint's trip) carries.

export function refuse(error: GatewayError): Verdict {
  return { kind: "refuse", error };
}

export function tooLarge(call: Call, figures: Figures): GatewayError {
  const what =
    figures.dimension === "inputTokens"
      ? "input tokens"
      : figures.dimension === "outputTokens"
        ? "output tokens"
        : figures.dimension;
  return new TooLargeForRateLimitError(
    `This call to ${call.view.model} needs about ${figures.needed} ${what} of its API key's rate-limit window, which holds ${figures.limit} in all: no wait can make room for it. Send less (a shorter conversation, a lower max_tokens), or use a key with a larger limit.`,
  );
}

export function waitedTooLong(retryAfterMs: number): GatewayError {
  return new RateLimitWaitExceededError(
    `The API key's rate-limit window will not have room for this call for another ${Math.ceil(retryAfterMs / 1_000)} s, past the longest Holdfast waits (predict.max_wait_s). Retry after that.`,
    retryAfterMs,
  );
}

const DIMENSION_NAMES: Readonly<Record<Dimension, string>> = {
  requests: "requests",
  tokens: "tokens",
  inputTokens: "input_tokens",
  outputTokens: "output_tokens",
};

export function predictionOf(
  action: PredictAction,
  keyId: string,
  figures: Figures,
  predicted: Pick<Predicted, "estimate" | "features">,
  at: { waitedMs: number; resumeAtMs: number },
): Prediction {
  const { estimate } = predicted;
  return {
    action,
    keyId,
    dimension: figures.dimension === undefined ? "" : DIMENSION_NAMES[figures.dimension],
    limit: Math.round(figures.limit),
    remaining: Math.round(figures.remaining),
    needed: Math.round(figures.needed),
    resetAtMs: Math.round(figures.resetAtMs),
    estimatedInputTokens: estimate.input,
    estimatedOutputTokens: estimate.output,
    estimatedTotalTokens: estimate.total,
    sigma: estimate.sigma,
    k: estimate.k,
    waitedMs: Math.round(at.waitedMs),
    resumeAtMs: Math.round(at.resumeAtMs),
    exactInput: predicted.features.exact,
  };
}
