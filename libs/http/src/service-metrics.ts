import { QUARANTINE_REASONS, type QuarantineReason } from "@holdfast/events";
import { counter, gauge, type MetricFamily } from "./metrics.js";

/** The services that read the log, as the `service` label names them. */
export const HOLDFAST_SERVICES = ["gateway", "projector", "control", "scheduler", "budget"] as const;

export type HoldfastService = (typeof HOLDFAST_SERVICES)[number];

// When this process started, as Prometheus's own process_start_time_seconds says it.
const STARTED_S = Math.round(performance.timeOrigin) / 1_000;

/**
 * What every service that reads the log measures: the events it set aside since it
 * started (`holdfast_events_quarantined_total`, one series per reason of the fixed set,
 * zeros included), and when it started (`holdfast_process_start_time_seconds`, so a
 * counter that went back to 0 reads as a restart, not as events undone).
 */
export function logReaderMetrics(
  service: HoldfastService,
  quarantined: () => { readonly by_reason: Readonly<Record<QuarantineReason, number>> },
): MetricFamily[] {
  return [
    counter({
      name: "holdfast_events_quarantined_total",
      help: "Events of the log this process could not use and set aside (quarantined) since it started, by reason; each stays in the log at its stream sequence.",
      labels: { service: [service], reason: QUARANTINE_REASONS },
      value: ({ reason }) => quarantined().by_reason[reason as QuarantineReason],
    }),
    gauge({
      name: "holdfast_process_start_time_seconds",
      help: "When this process started, in seconds since the Unix epoch.",
      labels: { service: [service] },
      value: () => STARTED_S,
    }),
  ];
}
