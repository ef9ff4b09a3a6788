import { type RunState, UsageEstimate } from "@holdfast/events";
import { NO_USAGE, type Pricer, type UsageReport } from "@holdfast/providers";

/**
 * How much of its answer a call got, as metering sees it:
 * - `whole`: the provider's answer, all of it (its usage report is the call's, if usable);
 * - `cut`: an answer cut off midway (the provider's connection broke, it sent an error
 *   event, the client left): what it produced is what was relayed;
 * - `unreadable`: an answer that came but could not be read (not JSON, a body cut short);
 * - `refused`: the provider refused the call (an error status): it bills nothing;
 * - `none`: no answer came (unreachable, or the client left before one): nothing is known;
 * - `lost`: the outcome was lost with the gateway that handled the call (the reaper's).
 */
export type Answered = "whole" | "cut" | "unreadable" | "refused" | "none" | "lost";

export interface MeterInput {
  readonly model: string;
  /** The catalog's provider for the upstream (providerFromUpstream), when Holdfast knows it. */
  readonly provider: string | undefined;
  /** What the answer reported, checked (NO_USAGE when it said nothing). */
  readonly usage: UsageReport;
  readonly answered: Answered;
  /** Input tokens estimated from the request, as its start recorded them. */
  readonly estimatedInputTokens: number;
  /** Output tokens estimated from what was relayed (stream events) or received (a body). */
  readonly seenOutputTokens: number;
  /** The run as this gateway holds it: its usual output so far. */
  readonly run: RunState | undefined;
  /** Whether a cost limit or a budget applies to the run (asked only for a model with no price). */
  readonly costControlled: () => boolean;
}

/** A step's usage and cost, as its outcome records them. */
export interface Metered {
  readonly usage: UsageReport;
  readonly cost: { readonly known: boolean; readonly nanoUsd: number };
  readonly estimated: boolean;
  readonly usageEstimate: UsageEstimate;
  readonly usageProblem: string;
  readonly unknownPrice: boolean;
}

const NOTHING_BILLED = Object.freeze({ known: true, nanoUsd: 0 });

/**
 * A step's usage and cost. The provider's report, checked where it was read, is the
 * step's when its answer was whole and the report usable; otherwise the step is charged
 * from Holdfast's own estimate, the reaper's for a lost outcome: the input its start
 * estimated from the request, and the run's usual output so far (for a run with none yet,
 * what the answer was seen to carry); for an answer cut off midway, what it had produced
 * as far as it was relayed (a provider may bill it), with the input the provider reported
 * if it did. Such a usage is not reported (`reported: false`): nothing learns from it.
 *
 * A model with no known price stays unknown, never zero, except where a cost limit or a
 * budget applies to the run: it is charged at the unknown rate there (`unknownPrice`).
 *
 * The common case (a whole answer, a usable report, a priced model) costs one price lookup.
 */
export function meterOutcome(input: MeterInput, pricer: Pricer): Metered {
  const { usage, answered } = input;
  if (answered === "refused")
    return metered(NO_USAGE, NOTHING_BILLED, UsageEstimate.USAGE_ESTIMATE_UNSPECIFIED, "");
  if (answered === "none") return priced(input, usage, UsageEstimate.USAGE_ESTIMATE_UNSPECIFIED, pricer);
  if (answered === "whole" && usage.reported) {
    return priced(input, usage, UsageEstimate.USAGE_ESTIMATE_UNSPECIFIED, pricer);
  }
  if (answered === "cut") {
    const estimate = estimatedUsage(
      usage.reported ? usage.inputTokens : input.estimatedInputTokens,
      Math.max(usage.reported ? usage.outputTokens : 0, input.seenOutputTokens),
    );
    return priced(
      input,
      { ...estimate, problem: usage.problem },
      UsageEstimate.USAGE_ESTIMATE_PARTIAL,
      pricer,
    );
  }
  const usual = usualOutputTokens(input.run);
  if (answered === "lost") {
    return priced(
      input,
      estimatedUsage(input.estimatedInputTokens, usual),
      UsageEstimate.USAGE_ESTIMATE_GATEWAY_LOST,
      pricer,
    );
  }
  // A whole answer whose report could not be used, or none at all; or one unreadable.
  const estimate = estimatedUsage(input.estimatedInputTokens, usual > 0 ? usual : input.seenOutputTokens);
  const why =
    usage.problem !== undefined ? UsageEstimate.USAGE_ESTIMATE_INVALID : UsageEstimate.USAGE_ESTIMATE_MISSING;
  return priced(input, { ...estimate, problem: usage.problem }, why, pricer);
}

/** Output tokens of the run's finished calls on average; 0 before its first. */
export function usualOutputTokens(run: RunState | undefined): number {
  return run !== undefined && run.completed > 0 ? Math.round(run.totals.outputTokens / run.completed) : 0;
}

/** Holdfast's estimate of a call's usage: not the provider's report. */
function estimatedUsage(inputTokens: number, outputTokens: number): UsageReport {
  return { ...NO_USAGE, inputTokens, outputTokens };
}

function priced(input: MeterInput, usage: UsageReport, why: UsageEstimate, pricer: Pricer): Metered {
  const estimated = why !== UsageEstimate.USAGE_ESTIMATE_UNSPECIFIED;
  // The pricer prices only what was reported; an estimate is priced as if it had been.
  const counted = estimated ? { ...usage, reported: true } : usage;
  const price = pricer.price({ model: input.model, usage: counted, provider: input.provider });
  const problem = usage.problem ?? "";
  if (price.known || !counted.reported || !input.costControlled()) return metered(usage, price, why, problem);
  return {
    ...metered(usage, { known: true, nanoUsd: pricer.priceUnknown(counted) }, why, problem),
    unknownPrice: true,
  };
}

function metered(
  usage: UsageReport,
  cost: { known: boolean; nanoUsd: number },
  why: UsageEstimate,
  problem: string,
): Metered {
  return {
    usage,
    cost,
    estimated: why !== UsageEstimate.USAGE_ESTIMATE_UNSPECIFIED,
    usageEstimate: why,
    usageProblem: problem,
    unknownPrice: false,
  };
}
