import { Api } from "@holdfast/events";
import type { RunLabels } from "@holdfast/runs";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import {
  GatewayError,
  LogUnavailableError,
  PassthroughDeniedError,
  RunStoppedGatewayError,
  ShuttingDownError,
  UpstreamTimeoutError,
  UpstreamUnreachableError,
} from "../errors.js";
import type { Admission } from "../hold/admission.js";
import type { Parkable } from "../hold/park.js";
import type { Cancellation } from "../pipeline/hooks.js";
import { ResponseWriter } from "../pipeline/writer.js";
import { forwardHeaders, isTimeout, returnHeaders, type Upstreams } from "../upstream/upstream.js";
import { callsModelUnmetered, type NamedRun, spendsNothing } from "./govern.js";

export interface PassthroughDeps {
  upstreams: Upstreams;
  /** gateway.passthrough: `deny_models` refuses the paths that run a model unmetered. */
  mode: "allow" | "deny_models";
  /** The run a call names (header, body field, traceparent), if any. */
  runOf: (request: FastifyRequest) => NamedRun | undefined;
  /** Holds and stops, as the metered routes meet them: the run's state and its parking. */
  admission: Pick<Admission, "passthroughGate" | "park">;
}

/**
 * Every other provider path under /v1 (models, embeddings, files, count_tokens, …) is
 * forwarded as it is, to the provider the request speaks to, so pointing an SDK at
 * Holdfast breaks nothing. These calls are not steps of a run: neither recorded nor
 * metered. A call that names a run is governed as the run is, all the same: refused (409)
 * while the run is stopped, parked while it is held, and a run past one of its limits is
 * tripped first; a call that cannot spend (`spendsNothing`) goes on whatever its run. With
 * `deny_models`, a write to a path that makes the provider run a model unmetered is
 * refused before its body is read.
 */
export function passthrough(deps: PassthroughDeps) {
  return async (app: FastifyInstance) => {
    const deny =
      deps.mode === "deny_models"
        ? {
            onRequest: (request: FastifyRequest, _reply: FastifyReply, done: (error?: Error) => void) => {
              const path = pathOf(request);
              done(
                callsModelUnmetered(request.method, path)
                  ? new PassthroughDeniedError(request.method, path)
                  : undefined,
              );
            },
          }
        : {};
    app.all("/v1/*", deny, async (request, reply) => {
      const abort = new AbortController();
      reply.raw.on("close", () => {
        if (!reply.raw.writableFinished) abort.abort(CLIENT_GONE);
      });
      // A call that cannot spend (a read, a cancel, a token count) goes on whatever its run.
      const run = spendsNothing(request.method, pathOf(request)) ? undefined : deps.runOf(request);
      if (run !== undefined && !(await admitted(run, request, reply, abort, deps.admission))) return reply;
      const body = Buffer.isBuffer(request.body) && request.body.length > 0 ? request.body : undefined;
      const upstream = deps.upstreams.forPassthrough(request.url, request.headers);
      let response: Awaited<ReturnType<typeof upstream.request>>;
      try {
        response = await upstream.request({
          path: request.url.slice("/v1".length),
          method: request.method,
          headers: forwardHeaders(request.headers, body?.length),
          body,
          signal: abort.signal,
        });
      } catch (error) {
        if (abort.signal.aborted) return reply;
        const message = `The provider could not be reached: ${(error as Error).message}`;
        throw isTimeout(error)
          ? new UpstreamTimeoutError("The provider did not answer in time.", { cause: error })
          : new UpstreamUnreachableError(message, { cause: error });
      }
      return reply
        .code(response.statusCode)
        .headers(returnHeaders(response.headers, undefined))
        .send(response.body);
    });
  };
}

/**
 * Lets a call that names a run go on as the run allows: at once, unless the run is stopped
 * (a 409, as on the metered routes) or held (parked like a metered call, with the 1xx
 * keepalives its client tolerates, until the run is resumed or stopped). False when the
 * client left while it waited: nothing is forwarded.
 */
async function admitted(
  run: NamedRun,
  request: FastifyRequest,
  reply: FastifyReply,
  /** The call's cancellation: aborted when the client leaves (or the gateway shuts down while it is parked). */
  cancellation: AbortController,
  admission: PassthroughDeps["admission"],
): Promise<boolean> {
  const labels: RunLabels = { tag: run.tag, tenant: run.tenant };
  let parkable: Parkable | undefined;
  for (;;) {
    let gate: Awaited<ReturnType<typeof admission.passthroughGate>>;
    try {
      gate = await admission.passthroughGate(run.runId, labels);
    } catch (error) {
      if (error instanceof GatewayError) throw error;
      throw new LogUnavailableError(
        "Holdfast could not read from its event log whether this call's run is held or stopped, so it was not sent to the provider. Retry shortly.",
        { cause: error },
      );
    }
    if (gate === "go") return true;
    if (gate === "stopped") throw new RunStoppedGatewayError(run.runId);
    // What parking needs of the call: it is no stream Holdfast can open itself (what the
    // provider answers is not known), so a waiting client gets the 1xx it tolerates, if any.
    parkable ??= {
      run,
      api: Api.API_UNSPECIFIED,
      view: { model: "", stream: false },
      upstreamBody: Buffer.isBuffer(request.body) ? request.body : undefined,
      request,
      writer: new ResponseWriter(reply.raw),
      signal: cancellation.signal,
      cancel: (reason) => cancellation.abort(reason),
    };
    const how = await admission.park(parkable, labels);
    if (how === "client_gone") return false;
    if (how === "stopped") throw new RunStoppedGatewayError(run.runId);
    if (how === "shutdown" || how === "gave_up") throw new ShuttingDownError();
    // Released: the run may have been held again before this call goes on.
  }
}

const CLIENT_GONE: Cancellation = Object.freeze({ kind: "client_gone" });

/** The request's path, without its query. */
function pathOf(request: FastifyRequest): string {
  const query = request.url.indexOf("?");
  return query === -1 ? request.url : request.url.slice(0, query);
}
