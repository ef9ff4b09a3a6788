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

// A call that waited its ceiling for a slot is told to retry after this: a slot comes back
// when a call in flight ends, which nothing on a key without headers foretells.
const SLOT_RETRY_AFTER_MS = 1_000;

export function waitedForSlot(limit: number): GatewayError {
  return new RateLimitWaitExceededError(
    `The API key's provider reports no rate-limit window and has refused calls, so Holdfast sends at most ${limit} of them at once on it; none ended in time for this call within the longest Holdfast waits (predict.max_wait_s). Retry shortly.`,
    SLOT_RETRY_AFTER_MS,
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
