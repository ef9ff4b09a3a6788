import type { GatewayFeature } from "./hooks.js";

/**
 * The gateway's features, in the one order the pipeline asks them at each of its hooks:
 *
 * - routing: a model alias goes to the route target with the most headroom (before
 *   forward), and a failed attempt to the next target (after a failure);
 * - pricing: the call's reservation, priced for the model it now goes to;
 * - predict: rate-limit prediction for that target's key window (wait, checkpoint,
 *   compaction), and a 429's retry after its wait (after a failure, once routing had its say);
 * - budget: the reservation taken out of the run's budgets (or the run tripped);
 * - hold: holds, limits and standing rules, last before the start (a held run's call parks);
 * - gate: the tool-call gate, before delivery.
 *
 * Adding a feature is a folder of its own and one line here (and its construction in
 * service.ts, the composition root).
 */
export const FEATURE_ORDER = ["routing", "pricing", "predict", "budget", "hold", "gate"] as const;

export type FeatureName = (typeof FEATURE_ORDER)[number];

/** The features configured, in the declared order (those not configured left out). */
export function inOrder(features: Partial<Record<FeatureName, GatewayFeature>>): GatewayFeature[] {
  const ordered: GatewayFeature[] = [];
  for (const name of FEATURE_ORDER) {
    const feature = features[name];
    if (feature !== undefined) ordered.push(feature);
  }
  return ordered;
}
