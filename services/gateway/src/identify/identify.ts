import { createHash } from "node:crypto";
import { RunSource, runIdDefect, scopedRunId, tagDefect, tenantDefect } from "@holdfast/events";
import type { RequestView } from "@holdfast/providers";
import { InvalidRequestError } from "../errors.js";
import { DuplicateHeaderError, type RequestHeaders, UndecodableHeaderError } from "../http/headers.js";

export interface IdentifyRules {
  /** Request headers that name a run, first match wins. */
  headers: readonly string[];
  /** Dotted body paths that name a run, e.g. "metadata.run_id". */
  bodyFields: readonly string[];
  /** Use a W3C traceparent's trace id as the run id. */
  traceparent: boolean;
  tagHeaders: readonly string[];
  tagFields: readonly string[];
  tenantHeaders: readonly string[];
}

export interface ExplicitRun {
  /** The run's id in the log: the id the call sent, scoped by its tenant (scopedRunId). */
  runId: string;
  source: RunSource;
  /** The header or field that named it; empty for traceparent. */
  key: string;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?$/;

/**
 * The run a call names itself, if it does: `named`, by a header, then a body field;
 * `traced`, by a W3C trace id. Undefined when the call names nothing that way. Either is
 * the id of `tenant`'s run (scopedRunId): two tenants naming one id name two runs. A named
 * id that cannot be a run id is the client's error, reported with where it came from.
 */
export function explicitRun(
  headers: RequestHeaders,
  body: unknown,
  rules: IdentifyRules,
  which: "named" | "traced",
  tenant: string,
): ExplicitRun | undefined {
  if (which === "traced") {
    if (!rules.traceparent) return undefined;
    // W3C Trace Context: several traceparent headers make it invalid, and it is ignored.
    const traceId = traceIdOf(optionalHeader(headers, "traceparent"));
    return traceId === undefined
      ? undefined
      : {
          runId: checkRunId(traceId, "header traceparent", tenant),
          source: RunSource.RUN_SOURCE_TRACEPARENT,
          key: "",
        };
  }
  for (const name of rules.headers) {
    const value = headerValue(headers, name);
    if (value !== undefined)
      return {
        runId: checkRunId(value, `header ${name}`, tenant),
        source: RunSource.RUN_SOURCE_HEADER,
        key: name,
      };
  }
  for (const path of rules.bodyFields) {
    const value = fieldValue(body, path);
    if (value !== undefined)
      return {
        runId: checkRunId(value, `body field ${path}`, tenant),
        source: RunSource.RUN_SOURCE_BODY,
        key: path,
      };
  }
  return undefined;
}

/** The run's tenant from a header, first match wins; "" when none. */
export function readTenant(headers: RequestHeaders, rules: IdentifyRules): string {
  for (const name of rules.tenantHeaders) {
    const value = headerValue(headers, name);
    if (value === undefined) continue;
    const defect = tenantDefect(value);
    if (defect !== undefined) throw new InvalidRequestError(`The tenant in header ${name} ${defect}.`);
    return value;
  }
  return "";
}

/** The run's tag from a header or body field, first match wins; "" when none. */
export function readTag(headers: RequestHeaders, body: unknown, rules: IdentifyRules): string {
  for (const name of rules.tagHeaders) {
    const value = headerValue(headers, name);
    if (value !== undefined) return checkTag(value, `header ${name}`);
  }
  for (const path of rules.tagFields) {
    const value = fieldValue(body, path);
    if (value !== undefined) return checkTag(value, `body field ${path}`);
  }
  return "";
}

/** The trace id of a valid W3C traceparent (version 00 or later, not all zeros). */
export function traceIdOf(traceparent: string | undefined): string | undefined {
  if (traceparent === undefined) return undefined;
  const match = TRACEPARENT.exec(traceparent.trim().toLowerCase());
  if (!match) return undefined;
  const [, version, traceId, spanId] = match;
  if (version === "ff" || /^0+$/.test(traceId!) || /^0+$/.test(spanId!)) return undefined;
  // Version 00 allows nothing after the flags.
  if (version === "00" && traceparent.trim().length !== 55) return undefined;
  return traceId;
}

/**
 * What stays constant across one agent's loop: the model, the system prompt and the first
 * message after it. Hex, 16 characters (64 bits).
 */
export function promptHashOf(view: RequestView): string {
  return createHash("sha256")
    .update(view.model)
    .update("\u0000")
    .update(view.systemPrompt)
    .update("\u0000")
    .update(view.firstMessage)
    .digest("hex")
    .slice(0, 16);
}

function headerValue(headers: RequestHeaders, name: string): string | undefined {
  try {
    return headers.get(name);
  } catch (error) {
    if (error instanceof DuplicateHeaderError || error instanceof UndecodableHeaderError) {
      throw new InvalidRequestError(error.message, { cause: error });
    }
    throw error;
  }
}

function optionalHeader(headers: RequestHeaders, name: string): string | undefined {
  try {
    return headers.get(name);
  } catch (error) {
    if (error instanceof DuplicateHeaderError || error instanceof UndecodableHeaderError) return undefined;
    throw error;
  }
}

function fieldValue(body: unknown, path: string): string | undefined {
  let node: unknown = body;
  for (const key of path.split(".")) {
    if (node === null || typeof node !== "object" || Array.isArray(node)) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  if (typeof node === "number" && Number.isFinite(node)) return String(node);
  if (typeof node !== "string") return undefined;
  const trimmed = node.trim();
  return trimmed ? trimmed : undefined;
}

/**
 * The agent loop a call belongs to, within its tenant: the prompt's hash, and for a tenant's
 * call that hash with the tenant's name, so two tenants' identical agents are two loops (two
 * generation counters, two runs). Hex, 16 characters.
 */
export function fingerprintIn(tenant: string, promptHash: string): string {
  if (tenant === "") return promptHash;
  return createHash("sha256").update(tenant).update("\u0000").update(promptHash).digest("hex").slice(0, 16);
}

/**
 * `value` as `tenant`'s run id, checked by the event model's own rules (the ones
 * `assertRunId` enforces), said with where the value came from; the prefix scoping adds
 * counts toward the length.
 */
function checkRunId(value: string, where: string, tenant: string): string {
  const defect = runIdDefect(value);
  if (defect !== undefined) throw new InvalidRequestError(`The run id in ${where} ${defect}.`);
  const scoped = scopedRunId(tenant, value);
  if (scoped === value) return value;
  const scopedDefect = runIdDefect(scoped);
  if (scopedDefect !== undefined) {
    const prefix =
      tenant === ""
        ? 'the leading "/" an untenanted run id holding "/" is given'
        : `its tenant's prefix ${JSON.stringify(`${tenant}/`)}`;
    throw new InvalidRequestError(
      `The run id in ${where}, with ${prefix}, ${scopedDefect}: the prefix counts toward the limit.`,
    );
  }
  return scoped;
}

function checkTag(value: string, where: string): string {
  const defect = tagDefect(value);
  if (defect !== undefined) throw new InvalidRequestError(`The tag in ${where} ${defect}.`);
  return value;
}
