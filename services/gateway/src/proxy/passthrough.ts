import type { FastifyInstance } from "fastify";
import { UpstreamTimeoutError, UpstreamUnreachableError } from "../errors.js";
import { forwardHeaders, isTimeout, returnHeaders, type Upstreams } from "../upstream/upstream.js";

/**
 * Every other provider path under /v1 (models, embeddings, files, count_tokens, …) is
 * forwarded as it is, to the provider the request speaks to, so pointing an SDK at
 * Holdfast breaks nothing. These calls are not steps of a run: neither recorded nor metered.
 */
export function passthrough(upstreams: Upstreams) {
  return async (app: FastifyInstance) => {
    app.all("/v1/*", async (request, reply) => {
      const abort = new AbortController();
      reply.raw.on("close", () => {
        if (!reply.raw.writableFinished) abort.abort();
      });
      const body = Buffer.isBuffer(request.body) && request.body.length > 0 ? request.body : undefined;
      const upstream = upstreams.forPassthrough(request.url, request.headers);
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
