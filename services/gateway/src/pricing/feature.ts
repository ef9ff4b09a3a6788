import { UnpricedModelError } from "../errors.js";
import type { Admission } from "../hold/admission.js";
import { CONTINUE, type GatewayFeature, type Verdict } from "../pipeline/hooks.js";

export interface PricingFeatureOptions {
  admission: Admission;
  /** pricing.unknown: a model with no known price, in a run under a cost limit or budget. */
  unknown: "charge" | "refuse";
}

/**
 * Models without a known price, before forward, for the model the call goes to (after
 * routing, which may send it to another): in a run under a cost limit or budget, the call
 * is refused (pricing.unknown: refuse; a 400, nothing forwarded) or reserves its estimate
 * at the unknown rate (charge), as its outcome will be charged; elsewhere it goes on, its
 * cost unknown. A call priced as it came costs two comparisons here.
 */
export function pricingFeature(options: PricingFeatureOptions): GatewayFeature {
  const { admission, unknown } = options;
  return async (app) => {
    app.pipeline.beforeForward.push((call): Verdict => {
      if (call.reservedFor !== call.model) {
        const reservation = admission.reserve(
          call.run.runId,
          call.run.tag,
          call.view,
          call.model,
          call.upstream,
          call.estimatedInputTokens,
        );
        call.reservedNanoUsd = reservation.nanoUsd;
        call.reservedFor = call.model;
        call.unpriced = reservation.unpriced;
      }
      if (call.unpriced && unknown === "refuse")
        return { kind: "refuse", error: new UnpricedModelError(call.model) };
      return CONTINUE;
    });
  };
}
