import type { IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import type { Logger } from "@holdfast/log";
import { openAIErrorBody } from "@holdfast/providers";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  LogController,
} from "fastify";
import { GatewayError } from "./errors.js";
import { decodedBody, UnsupportedContentEncodingError } from "./http/body.js";
import { normalizeTarget } from "./http/path.js";
import { type ChatCompletionsDeps, registerChatCompletions } from "./proxy/chat-completions.js";
import { registerPassthrough } from "./proxy/passthrough.js";

export interface GatewayAppDeps extends ChatCompletionsDeps {
  log: Logger;
  maxBodyBytes: number;
  /** Reports whether the event log is reachable, for /holdfast/health. */
  health: () => { nats: "connected" | "disconnected" };
}

/**
 * The gateway's HTTP surface. Every error on a provider route is answered in the
 * provider's own error shape, so an SDK raises it as it would the provider's.
 */
export function buildApp(deps: GatewayAppDeps): FastifyInstance {
  const logger: FastifyBaseLogger = deps.log;
  // Why a request target was refused, for the route that answers it (set before routing).
  const refusedTargets = new WeakMap<IncomingMessage, string>();
  let closing = false;
  const app = Fastify({
    // One spelling per path before routing: every spelling of a metered endpoint is metered.
    rewriteUrl(req) {
      const target = normalizeTarget(req.url ?? "/");
      if (target.ok) return target.url;
      refusedTargets.set(req, target.message);
      return REFUSED_TARGET;
    },
    // A request Node's parser refuses (malformed header bytes, headers too large) still
    // gets an error in the provider's shape.
    clientErrorHandler(error: NodeJS.ErrnoException, socket: Socket) {
      if (error.code === "ECONNRESET" || socket.destroyed) return;
      if (socket.writable) socket.write(rawErrorResponse(error));
      socket.destroy();
    },
    loggerInstance: logger,
    // One log line per model call would cost more than the proxying; errors are logged.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: deps.maxBodyBytes,
    // Agents hold connections open between calls.
    keepAliveTimeout: 75_000,
    // Answered below, in the provider's shape.
    return503OnClosing: false,
  });

  app.addHook("preClose", async () => {
    closing = true;
  });
  app.addHook("onRequest", async (_request, reply) => {
    if (!closing) return;
    return reply
      .code(503)
      .header("connection", "close")
      .send(
        openAIErrorBody("This Holdfast gateway is shutting down; retry on another or in a moment.", {
          type: "server_error",
          code: "holdfast_shutting_down",
        }),
      );
  });
  // A compressed request body is decoded here, so it is read, metered and forwarded like any other.
  app.addHook("preParsing", async (request, _reply, payload) =>
    decodedBody(payload, request.headers["content-encoding"]),
  );

  // The raw bytes are kept: a request is forwarded exactly as the client sent it.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_request, body, done) => done(null, body));

  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof UnsupportedContentEncodingError) {
      return reply.code(415).send(openAIErrorBody(error.message, { code: "unsupported_content_encoding" }));
    }
    if (error instanceof GatewayError) {
      if (error.status >= 500) request.log.warn({ err: error }, "call not completed");
      return reply
        .code(error.status)
        .send(openAIErrorBody(error.message, { type: error.type, param: error.param, code: error.code }));
    }
    if (error.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
      return reply
        .code(413)
        .send(
          openAIErrorBody(
            `The request body is larger than ${deps.maxBodyBytes} bytes, the most this gateway accepts (gateway.max_body_bytes).`,
            { code: "request_too_large" },
          ),
        );
    }
    if (error.statusCode !== undefined && error.statusCode < 500) {
      return reply.code(error.statusCode).send(openAIErrorBody(error.message, { code: error.code ?? null }));
    }
    request.log.error({ err: error }, "unexpected gateway error");
    return reply.code(500).send(
      openAIErrorBody("Holdfast failed while handling this call.", {
        type: "server_error",
        code: "holdfast_error",
      }),
    );
  });

  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send(
      openAIErrorBody(`Holdfast does not serve ${request.method} ${request.url.split("?")[0]}.`, {
        code: "unknown_url",
      }),
    ),
  );

  app.all(REFUSED_TARGET, async (request, reply) =>
    reply.code(400).send(
      openAIErrorBody(refusedTargets.get(request.raw) ?? "The request path is not one Holdfast serves.", {
        code: "invalid_path",
      }),
    ),
  );
  app.get("/holdfast/health", async () => ({ status: "ok", pid: process.pid, ...deps.health() }));
  registerChatCompletions(app, deps);
  registerPassthrough(app, deps.upstream);
  return app;
}

const REFUSED_TARGET = "/holdfast/refused-target";

/** A whole HTTP response for a request the HTTP parser refused, in OpenAI's error shape. */
function rawErrorResponse(error: NodeJS.ErrnoException): string {
  const [status, text, message] =
    error.code === "HPE_HEADER_OVERFLOW"
      ? [431, "Request Header Fields Too Large", "The request headers are larger than this gateway accepts."]
      : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? [408, "Request Timeout", "The request was not received in time."]
        : [400, "Bad Request", `The request is not valid HTTP: ${error.message}.`];
  const body = JSON.stringify(openAIErrorBody(message, { code: "invalid_http" }));
  return `HTTP/1.1 ${status} ${text}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}
