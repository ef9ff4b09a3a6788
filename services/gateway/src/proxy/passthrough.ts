import type { FastifyInstance } from "fastify";
import { UpstreamTimeoutError, UpstreamUnreachableError } from "../errors.js";
import { forwardHeaders, isTimeout, returnHeaders, type Upstream } from "../upstream/upstream.js";

/**
 * Every other provider path under /v1 (models, embeddings, files, …) is forwarded as it
 * is, so pointing an SDK at Holdfast breaks nothing. These calls are not steps of a run:
 * they are neither recorded nor metered.
 */
export function registerPassthrough(app: FastifyInstance, upstream: Upstream): void {
  app.all("/v1/*", async (request, reply) => {
    const abort = new AbortController();
    reply.raw.on("close", () => {
      if (!reply.raw.writableFinished) abort.abort();
    });
    const body = Buffer.isBuffer(request.body) && request.body.length > 0 ? request.body : undefined;
    let response: Awaited<ReturnType<Upstream["request"]>>;
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
}
