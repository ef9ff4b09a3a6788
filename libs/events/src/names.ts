import {
  type ActorKind,
  type Api,
  actorKindToJSON,
  apiFromJSON,
  apiToJSON,
  type FailureReason,
  failureReasonToJSON,
  type LimitKind,
  limitKindToJSON,
  type RunSource,
  runSourceToJSON,
  type UnparkReason,
  UsageEstimate,
  unparkReasonToJSON,
  usageEstimateToJSON,
} from "@holdfast/proto";

// Short lowercase names of the enums, as people and SQL see them
// (API_OPENAI_CHAT_COMPLETIONS → "openai_chat_completions").

export const apiName = (api: Api): string => apiToJSON(api).replace(/^API_/, "").toLowerCase();

export const failureReasonName = (reason: FailureReason): string =>
  failureReasonToJSON(reason)
    .replace(/^FAILURE_REASON_/, "")
    .toLowerCase();

export const runSourceName = (source: RunSource): string =>
  runSourceToJSON(source)
    .replace(/^RUN_SOURCE_/, "")
    .toLowerCase();

/** Inverse of apiName. */
export const apiFromName = (name: string): Api => apiFromJSON(`API_${name.toUpperCase()}`);

export const limitName = (limit: LimitKind): string =>
  limitKindToJSON(limit)
    .replace(/^LIMIT_KIND_/, "")
    .toLowerCase();

export const actorName = (kind: ActorKind): string =>
  actorKindToJSON(kind)
    .replace(/^ACTOR_KIND_/, "")
    .toLowerCase();

export const unparkName = (reason: UnparkReason): string =>
  unparkReasonToJSON(reason)
    .replace(/^UNPARK_REASON_/, "")
    .toLowerCase();

/**
 * Why a step's usage is Holdfast's estimate ("invalid", "missing", "partial", "gateway_lost"),
 * "" when it is the provider's. An estimated step from before the reason was recorded lost
 * its outcome with its gateway: that was the only reason there was.
 */
export const usageEstimateName = (reason: UsageEstimate, estimated: boolean): string =>
  reason === UsageEstimate.USAGE_ESTIMATE_UNSPECIFIED
    ? estimated
      ? "gateway_lost"
      : ""
    : usageEstimateToJSON(reason)
        .replace(/^USAGE_ESTIMATE_/, "")
        .toLowerCase();
