import type { IncomingHttpHeaders } from "node:http";
import {
  type ConfiguredLimits,
  EVENT_BOUNDS,
  type HoldRule,
  type RunCommand,
  type RunState,
} from "@holdfast/events";
import { JsonTooDeepError, jsonDepthExceeds } from "@holdfast/http";
import type { ApiShape, Pricer } from "@holdfast/providers";
import type { Ledger } from "@holdfast/runs";
import type { FastifyReply, FastifyRequest } from "fastify";
import { FieldTooLongError, InvalidRequestError } from "../errors.js";
import { RequestHeaders } from "../http/headers.js";
import type { ResolveRun } from "../identify/resolve.js";
import type { ResponseIndex } from "../identify/responses.js";
import type { Upstreams } from "../upstream/upstream.js";
import { RequestBody } from "./body.js";
import type { CallSnapshots } from "./capture.js";
import { asGatewayError, type Ending, type FinishDeps, finish, refused } from "./finish.js";
import { forward } from "./forward.js";
import type { PipelineHooks } from "./hooks.js";
import type { CallOrigin } from "./origin.js";
import { relay } from "./relay.js";
import { CallState } from "./state.js";
import type { Waiting } from "./wait.js";

export interface PipelineDeps {
  ledger: Ledger<RunState, RunCommand>;
  upstreams: Upstreams;
  pricer: Pricer;
  /** This gateway process, as recorded in StepStarted ("<instance id>#<boot id>"). */
  instanceId: string;
  newId: () => string;
  resolveRun: ResolveRun;
  responses: ResponseIndex;
  /** The per-run limits configured for a tag, as a step's start records them. */
  limitsFor: (tag: string) => ConfiguredLimits;
  /** The standing hold rules in force, as a step's start records them. */
  rules: () => HoldRule[];
  /** Whether a cost limit or budget applies to the run (a model with no price is then charged). */
  costControlled: (runId: string, tag: string) => boolean;
  /** on_trip: what a trip does to its run when the feature that asked for it does not say. */
  onTrip: "hold" | "stop";
  /** Waiting and parking, with keepalives: what the pipeline offers its features and uses itself. */
  waiting: Waiting;
  /** False while the event log is unreachable: a call that cannot be recorded is not forwarded. */
  logConnected: () => boolean;
  onRecordError: (error: unknown, runId: string) => void;
  /** How deep a request body may nest (http.max_json_depth): deeper is refused before anything walks it. */
  maxJsonDepth: number;
  /** The most of a provider's answer read, decompressed (gateway.max_answer_bytes). */
  maxAnswerBytes: number;
  /** The most one event of a provider's stream may take while incomplete (gateway.max_event_bytes). */
  maxEventBytes: number;
  /** Stores each step's request and answer (snapshots.enabled), or nothing. */
  snapshots?: CallSnapshots;
  /** An operator's call sent again from a recorded step, read from its headers and checked (origin.ts). */
  originOf?: (headers: RequestHeaders, tag: string) => CallOrigin | undefined;
}

/**
 * One model call, whatever its API shape, as a chain of stages:
 *
 * read (the body parsed once, the run identified) → admit (the features' amendments in
 * their declared order; a held run's call parked, for as long as it takes; the start
 * appended) → forward (sent while the start is appended, the answer's first byte waiting
 * for the start's ack, which overlaps the provider's own latency; sent again as the
 * features say after a failure) → relay (streamed or buffered, metered as it comes) →
 * finish (the outcome recorded without making the client wait for it, the decision before
 * delivery, the client answered once).
 *
 * Every way a call ends goes through finish. A call killed between its answer and its
 * outcome's ack is charged by the reaper from what the start recorded, marked as
 * estimated: an answered call is never unmetered.
 */
export async function handleCall(
  shape: ApiShape,
  hooks: PipelineHooks,
  deps: PipelineDeps,
  finishing: FinishDeps<CallState>,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<void> {
  const t0 = performance.now();
  const raw = request.body as Buffer;
  const value = parseJson(raw, deps.maxJsonDepth);
  const read = shape.readRequest(value);
  if (!read.ok) throw new InvalidRequestError(read.error.message, { param: read.error.param });
  const view = read.request;
  // The model's name goes into the call's events: one longer than they record is refused
  // here, before the call is identified, recorded or forwarded.
  if (view.model.length > EVENT_BOUNDS.modelChars) {
    throw new FieldTooLongError("model", view.model.length, EVENT_BOUNDS.modelChars);
  }
  // The client going away cancels everything done on its behalf: the upstream attempt in
  // flight directly, and whoever listens on the call's signal. Listened for before the run
  // is identified (a read of the log or of a bucket): a client gone meanwhile is gone.
  let call: CallState | undefined;
  let left = false;
  reply.raw.on("close", () => {
    if (reply.raw.writableFinished) return;
    left = true;
    call?.clientGone();
  });
  const headers = new RequestHeaders(request.raw.rawHeaders);
  const run = await deps.resolveRun(headers, value, view, request.keyTenant);
  // Checked before anything is recorded: a call claiming an operator's origin without the
  // control token is refused, never taken for an agent's.
  const origin = deps.originOf?.(headers, run.tag);
  call = new CallState(
    shape,
    view,
    run,
    request,
    deps.newId(),
    new RequestBody(shape, view, value as Record<string, unknown>, raw),
    credentialsOf(request.headers),
    deps.upstreams.forShape(shape),
    reply.raw,
    t0,
    raw.length,
  );
  if (left) call.clientGone();
  call.origin = origin;
  call.capturing = deps.snapshots?.maxChars ?? 0;
  // From here the gateway writes the answer itself (a held call gets keepalives before
  // anything else), so every ending is answered by finish, in the call's API's shape.
  reply.hijack();
  let ending: Ending;
  try {
    const answered = await forward(call, hooks, deps);
    ending = "reply" in answered ? answered : await relay(call, deps, answered);
  } catch (error) {
    ending = refused(asGatewayError(error, call));
  }
  // Most endings finish at once; a whole answer may wait for the decision before delivery.
  const delivering = finish(call, ending, finishing);
  if (delivering !== undefined) await delivering;
}

function parseJson(raw: Buffer | undefined, maxDepth: number): unknown {
  if (raw === undefined || raw.length === 0) {
    throw new InvalidRequestError("The request body is empty; expected a JSON object.");
  }
  let body: unknown;
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch (error) {
    throw new InvalidRequestError(
      `We could not parse the JSON body of your request: ${(error as Error).message}`,
    );
  }
  // Refused here, before the request is read, identified, recorded or forwarded.
  if (jsonDepthExceeds(body, maxDepth)) throw new JsonTooDeepError(maxDepth);
  return body;
}

// Where providers take the key: OpenAI and most others (Authorization: Bearer), Anthropic
// (x-api-key), Azure OpenAI (api-key), Google (x-goog-api-key).
const KEY_HEADERS = ["x-api-key", "api-key", "x-goog-api-key"] as const;

/**
 * Credentials in this request, so that anything echoing them can be scrubbed: the
 * provider's key first (what the provider is sent; "" when the call has none), then a
 * tenant's Holdfast key and an operator's control token, which are no provider's keys but
 * are never recorded either.
 */
function credentialsOf(headers: IncomingHttpHeaders): string[] {
  const found: string[] = [];
  const auth = headers.authorization;
  if (typeof auth === "string") found.push(auth.replace(/^(Bearer|Basic)\s+/i, "").trim());
  for (const name of KEY_HEADERS) {
    const key = headers[name];
    if (typeof key === "string") found.push(key.trim());
  }
  const secrets = found.filter((s) => s.length > 0);
  const holdfastKey = headers["x-holdfast-key"];
  if (typeof holdfastKey === "string" && holdfastKey.trim() !== "") {
    if (secrets.length === 0) secrets.push("");
    secrets.push(holdfastKey.trim());
  }
  // An operator's call from a recorded step carries the control token: never recorded either.
  const controlToken = headers["x-holdfast-control-token"];
  if (typeof controlToken === "string" && controlToken.trim() !== "") {
    if (secrets.length === 0) secrets.push("");
    secrets.push(controlToken.trim());
  }
  return secrets;
}
