import type { Config } from "@holdfast/config";
import type { Logger } from "@holdfast/log";
import {
  type CallFeatures,
  type CostEstimator,
  type Estimate,
  Estimator,
  FeatureEstimator,
  type Need,
  TokenCounter,
} from "@holdfast/predict";
import type { Call } from "../pipeline/hooks.js";
import type { Key } from "./key.js";
import { floorOf, needOf } from "./need.js";
import type { Slice } from "./shared.js";

/** What prediction knows of one call in the gateway. */
export interface Predicted {
  /** The key of the upstream the call goes to (a route may move it to another before it is sent). */
  key: Key;
  /** When the call first came to prediction: its ceiling (max_wait_s) counts from here. */
  readonly sinceMs: number;
  features: CallFeatures;
  estimate: Estimate;
  need: Need;
  /** What the call takes for certain: its input, and its output cap (or estimate). */
  floor: Need;
  /** Gives up on the call (a 429 with retry-after) once it has waited its ceiling. */
  ceiling: NodeJS.Timeout | undefined;
  /** The shared window's slice the call's reservation came out of. */
  slice?: { readonly slice: Slice; readonly need: Need } | undefined;
}

export type Estimated = Omit<Predicted, "sinceMs" | "ceiling" | "key">;

const ESTIMATOR_BASE = { alpha: 0.3, defaultOutput: 1_024, maxRuns: 10_000 };

/**
 * A call's estimate: its input counted from the body (about four characters a token, or
 * exactly with the model's tokenizer), its output learned per run and model, and a margin
 * k·σ that a 429 slipping through makes wider.
 */
export class Estimates {
  readonly estimator: CostEstimator;
  private readonly counter = new TokenCounter();
  /** Settles when the tokenizers are loaded (or could not be). */
  readonly loading: Promise<void>;

  constructor(config: Config["predict"], log: Logger) {
    const estimatorOptions = { ...ESTIMATOR_BASE, k: config.k, kMax: config.k_max, kStep: config.k_step };
    this.estimator =
      config.estimator === "features"
        ? new FeatureEstimator(config.features, estimatorOptions)
        : new Estimator(estimatorOptions);
    this.loading = this.counter.load().catch((error: unknown) => {
      log.warn(
        { err: error },
        "could not load tokenizers: input is counted at about four characters a token",
      );
    });
  }

  of(call: Call, key: Key, exact: boolean, model = call.model): Estimated {
    const counted = exact
      ? this.counter.count(call.upstreamBody.toString("utf8"), model)
      : { tokens: call.estimatedInputTokens, exact: false };
    const features: CallFeatures = {
      runId: call.run.runId,
      model,
      tag: call.run.tag,
      countedInput: counted.tokens,
      exact: counted.exact,
      approxInput: call.estimatedInputTokens,
      maxOutput: call.view.maxOutputTokens,
      toolCount: call.view.toolCount,
      messageCount: call.view.messageCount,
    };
    const estimate = this.estimator.estimate(features);
    return {
      features,
      estimate,
      need: needOf(estimate, key.names),
      floor: floorOf(estimate, features, key.names),
    };
  }
}
