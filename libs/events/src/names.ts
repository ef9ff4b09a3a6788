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
  unparkReasonToJSON,
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
