import { UnpricedModelError } from "../errors.js";
import type { Admission } from "../hold/admission.js";
import { type Amendment, CONTINUE, type GatewayFeature } from "../pipeline/hooks.js";

export interface PricingFeatureOptions {
  /** What a call reserves while in flight, priced for a model (the limits' own reckoning). */
  reserve: Admission["reserve"];
  /** pricing.unknown: a model with no known price, in a run under a cost limit or budget. */
  unknown: "charge" | "refuse";
}

/**
 * The call's reservation, before forward, for the model the call goes to (after routing,
 * which may send it to another): its input estimated from the request, its output as the
 * run's usual, priced. A model without a known price, in a run under a cost limit or
 * budget, is refused (pricing.unknown: refuse; a 400, nothing forwarded) or reserves its
 * estimate at the unknown rate (charge), as its outcome will be charged; elsewhere it goes
 * on, its cost unknown. A call priced again for the model it was priced for costs two
 * comparisons here.
 */
export function pricingFeature(options: PricingFeatureOptions): GatewayFeature {
  const { reserve, unknown } = options;
  return async (app) => {
    app.pipeline.beforeForward.push((call): Amendment => {
      let unpriced = call.unpriced;
      let notes: Amendment | undefined;
      if (call.reservedFor !== call.model) {
        const reservation = reserve(
          call.run.runId,
          call.run.tag,
          call.view,
          call.model,
          call.upstream,
          call.estimatedInputTokens,
        );
        unpriced = reservation.unpriced;
        notes = {
          kind: "continue",
          notes: { reservation: { nanoUsd: reservation.nanoUsd, model: call.model, unpriced } },
        };
      }
      if (unpriced && unknown === "refuse")
        return { kind: "refuse", error: new UnpricedModelError(call.model) };
      return notes ?? CONTINUE;
    });
  };
}
