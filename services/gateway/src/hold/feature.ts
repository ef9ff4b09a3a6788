import { LogUnavailableError } from "../errors.js";
import { type Amendment, CONFIRM, CONTINUE, type GatewayFeature } from "../pipeline/hooks.js";
import type { Admission, Gate } from "./admission.js";

export interface HoldFeatureOptions {
  admission: Pick<Admission, "gate">;
}

const PARK: Amendment = Object.freeze({ kind: "park" });

/**
 * Holds, limits and standing rules at the pipeline's last decision before a step's start
 * (after every other feature before forward, and after a trip one of them asked for): a
 * held run's call parks (the pipeline's parking, for as long as the run is held); near a
 * limit, or where a standing rule matches, the start must be accepted by the log before
 * anything is forwarded; otherwise the call goes on, its start appended while it is sent.
 * The run's own decider has the last word (hold/admission.ts).
 */
export function holdFeature(options: HoldFeatureOptions): GatewayFeature {
  const { admission } = options;
  const amendmentOf = (gate: Gate): Amendment =>
    gate === "held" ? PARK : gate === "confirm" ? CONFIRM : CONTINUE;
  const unavailable = (error: unknown): Amendment => ({
    kind: "refuse",
    error: new LogUnavailableError(
      "Holdfast could not record this call in its event log, so it was not sent to the provider. Retry shortly.",
      { cause: error },
    ),
  });
  return async (app) => {
    app.pipeline.beforeStart.push((call) =>
      // An operator's call from a recorded step is never held: no limit or rule applies to it.
      call.origin !== undefined ? CONTINUE : admission.gate(call).then(amendmentOf, unavailable),
    );
  };
}
