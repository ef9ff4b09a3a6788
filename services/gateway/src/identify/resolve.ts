import { isTenantsRun, RunSource } from "@holdfast/events";
import type { RequestView } from "@holdfast/providers";
import type { RequestHeaders } from "../http/headers.js";
import type { Generations } from "./generations.js";
import {
  explicitRun,
  fingerprintIn,
  type IdentifyRules,
  promptHashOf,
  readTag,
  readTenant,
} from "./identify.js";
import type { ResponseIndex } from "./responses.js";

export interface ResolvedRun {
  /** The run's id in the log: scoped by its tenant, whatever named it (scopedRunId). */
  runId: string;
  identity: { source: RunSource; key: string; fingerprint: string; generation: number };
  tag: string;
  tenant: string;
  /** The conversation prefix's hash (model, system prompt, first message), whoever named the run. */
  promptHash: string;
}

/**
 * Which run a call belongs to. `keyTenant` is the tenant of the gateway key the call
 * carried (with `tenants` configured); undefined, the tenant is what its tenant header says.
 */
export type ResolveRun = (
  headers: RequestHeaders,
  body: unknown,
  view: RequestView,
  keyTenant: string | undefined,
) => Promise<ResolvedRun>;

/**
 * Which run a call belongs to, first match wins: a header, a body field, the run that
 * produced the response it continues (`previous_response_id`), a W3C trace id, and
 * otherwise a fingerprint of the agent's loop split into generations. Every one names a
 * run of the call's tenant: two tenants never share a run, whatever ids they send.
 */
export function runResolver(
  rules: IdentifyRules,
  generations: Generations,
  responses: ResponseIndex,
): ResolveRun {
  return async (headers, body, view, keyTenant) => {
    const tag = readTag(headers, body, rules);
    // A key's tenant is the call's, whatever a header says.
    const tenant = keyTenant ?? readTenant(headers, rules);
    const promptHash = promptHashOf(view);
    const named = explicitRun(headers, body, rules, "named", tenant);
    if (named)
      return {
        runId: named.runId,
        tag,
        tenant,
        promptHash,
        identity: { source: named.source, key: named.key, fingerprint: "", generation: 0 },
      };
    if (view.previousResponseId !== undefined) {
      const runId = await responses.runOf(view.previousResponseId);
      // Another tenant's response is no run of this call's: as good as unknown.
      if (runId !== undefined && isTenantsRun(tenant, runId)) {
        return {
          runId,
          tag,
          tenant,
          promptHash,
          identity: {
            source: RunSource.RUN_SOURCE_PREVIOUS_RESPONSE,
            key: view.previousResponseId,
            fingerprint: "",
            generation: 0,
          },
        };
      }
    }
    const traced = explicitRun(headers, body, rules, "traced", tenant);
    if (traced)
      return {
        runId: traced.runId,
        tag,
        tenant,
        promptHash,
        identity: { source: traced.source, key: traced.key, fingerprint: "", generation: 0 },
      };
    const fingerprint = fingerprintIn(tenant, promptHash);
    const { runId, generation } = await generations.resolve(fingerprint, view.messageCount, tenant);
    return {
      runId,
      tag,
      tenant,
      promptHash,
      identity: { source: RunSource.RUN_SOURCE_FINGERPRINT, key: "", fingerprint, generation },
    };
  };
}
