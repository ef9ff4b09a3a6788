import type { FastifyRequest } from "fastify";
import { RequestHeaders } from "../http/headers.js";
import { explicitRun, type IdentifyRules, readTag, readTenant } from "../identify/identify.js";

/**
 * Paths (and everything under them) where a write makes the provider run a model, and so
 * spend, without Holdfast metering it: what `gateway.passthrough: deny_models` refuses.
 * Reads (GET, HEAD), DELETEs, token counts and cancels under them stay allowed
 * (`spendsNothing`): a batch's status or results, a list of jobs, a batch's cancel.
 */
export const UNMETERED_MODEL_PATHS: readonly string[] = [
  // OpenAI
  "/v1/completions", // legacy text completions
  "/v1/embeddings",
  "/v1/batches", // a batch is many model calls
  "/v1/responses/compact", // compacting a conversation is a model call
  "/v1/images", // generations, edits, variations
  "/v1/audio", // speech, transcriptions, translations
  "/v1/realtime", // realtime sessions and the client secrets that open them
  "/v1/fine_tuning",
  "/v1/threads", // Assistants: a thread's runs call the model
  "/v1/vector_stores", // files added are embedded
  "/v1/evals", // an eval's runs call the model
  "/v1/videos",
  // Anthropic
  "/v1/complete", // legacy Text Completions
  "/v1/messages/batches",
];

const READS = new Set(["GET", "HEAD", "DELETE"]);
// POSTs that spend nothing and only lower what is spent: counting tokens, cancelling a batch,
// a response, a job or a run in the background. Each named as the providers' APIs name it,
// so a path of another shape that happens to end the same way is governed.
const FREE_POSTS = [
  /^\/v1\/messages\/count_tokens$/,
  /^\/v1\/responses\/input_tokens$/,
  /^\/v1\/(?:batches|responses|fine_tuning\/jobs|messages\/batches|uploads)\/[^/]+\/cancel$/,
  /^\/v1\/threads\/[^/]+\/runs\/[^/]+\/cancel$/,
  /^\/v1\/vector_stores\/[^/]+\/file_batches\/[^/]+\/cancel$/,
];

/**
 * Whether a passed-through call cannot make the provider spend: a read (GET, HEAD), a
 * DELETE, counting tokens, or a cancel. Such a call goes on whatever its run's state (a
 * held run's agent may still read a batch's results or cancel it) and whatever
 * `gateway.passthrough` says.
 */
export function spendsNothing(method: string, path: string): boolean {
  if (READS.has(method)) return true;
  return method === "POST" && FREE_POSTS.some((free) => free.test(path));
}

/** Whether `deny_models` refuses this request: a write on or under an unmetered model path. */
export function callsModelUnmetered(method: string, path: string): boolean {
  if (spendsNothing(method, path)) return false;
  return UNMETERED_MODEL_PATHS.some((p) => path === p || path.startsWith(`${p}/`));
}

/** The run a passed-through call names, with its labels. */
export interface NamedRun {
  readonly runId: string;
  readonly tag: string;
  readonly tenant: string;
}

/**
 * Which run a passed-through call names, by the rules a metered call is identified by
 * (a header, a body field, a W3C traceparent), scoped by its tenant; undefined when it
 * names none (it is not fingerprinted: it has no conversation). The common call names no
 * run and costs a few header lookups: the body is parsed only when it is JSON and holds
 * the name of a configured body field. An id that cannot be a run id is the client's
 * error, as on the metered routes (InvalidRequestError).
 */
export function passthroughRunNamer(rules: IdentifyRules): (request: FastifyRequest) => NamedRun | undefined {
  const headerNames = [...rules.headers, ...(rules.traceparent ? ["traceparent"] : [])].map((h) =>
    h.toLowerCase(),
  );
  // Each body field's first key, as it must appear in the body's bytes for the field to be there.
  const needles = [...new Set(rules.bodyFields.map((path) => path.split(".")[0]!))].map((key) =>
    Buffer.from(JSON.stringify(key)),
  );
  return (request) => {
    const named = headerNames.some((name) => request.headers[name] !== undefined);
    const body = needles.length === 0 ? undefined : jsonBodyNaming(request, needles);
    if (!named && body === undefined) return undefined;
    const headers = new RequestHeaders(request.raw.rawHeaders);
    // A key's tenant is the call's, whatever a header says.
    const tenant = request.keyTenant ?? readTenant(headers, rules);
    const run =
      explicitRun(headers, body, rules, "named", tenant) ??
      explicitRun(headers, body, rules, "traced", tenant);
    if (run === undefined) return undefined;
    return { runId: run.runId, tag: readTag(headers, body, rules), tenant };
  };
}

/** The body as JSON, when it is JSON and may hold a body field that names a run. */
function jsonBodyNaming(request: FastifyRequest, needles: readonly Buffer[]): unknown {
  const raw = request.body;
  if (!Buffer.isBuffer(raw) || raw.length === 0) return undefined;
  if (!String(request.headers["content-type"] ?? "").includes("json")) return undefined;
  if (!needles.some((needle) => raw.includes(needle))) return undefined;
  try {
    return JSON.parse(raw.toString("utf8")) as unknown;
  } catch {
    // Not JSON after all: the provider says so; it names no run here.
    return undefined;
  }
}
