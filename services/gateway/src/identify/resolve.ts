import { RunSource } from "@holdfast/events";
import type { ChatRequestView } from "@holdfast/providers";
import type { RequestHeaders } from "../http/headers.js";
import type { ResolvedRun } from "../proxy/chat-completions.js";
import type { Generations } from "./generations.js";
import { explicitRun, fingerprintOf, type IdentifyRules, readTag } from "./identify.js";

/**
 * Which run a call belongs to, first match wins: a header, a body field, a W3C trace id,
 * and otherwise a fingerprint of the agent's loop split into generations.
 */
export function runResolver(rules: IdentifyRules, generations: Generations) {
  return async (headers: RequestHeaders, body: unknown, view: ChatRequestView): Promise<ResolvedRun> => {
    const tag = readTag(headers, body, rules);
    const named = explicitRun(headers, body, rules);
    if (named) {
      return {
        runId: named.runId,
        tag,
        identity: { source: named.source, key: named.key, fingerprint: "", generation: 0 },
      };
    }
    const fingerprint = fingerprintOf(view);
    const { runId, generation } = await generations.resolve(fingerprint, view.messageCount);
    return {
      runId,
      tag,
      identity: { source: RunSource.RUN_SOURCE_FINGERPRINT, key: "", fingerprint, generation },
    };
  };
}
