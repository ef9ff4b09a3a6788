import type { Logger } from "@holdfast/log";
import { openAIErrorBody } from "@holdfast/providers";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  LogController,
} from "fastify";
import { GatewayError } from "./errors.js";
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
  const app = Fastify({
    loggerInstance: logger,
    // One log line per model call would cost more than the proxying; errors are logged.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: deps.maxBodyBytes,
    // Agents hold connections open between calls.
    keepAliveTimeout: 75_000,
    return503OnClosing: true,
  });

  // The raw bytes are kept: a request is forwarded exactly as the client sent it.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_request, body, done) => done(null, body));

  app.setErrorHandler((error: FastifyError, request, reply) => {
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

  app.get("/holdfast/health", async () => ({ status: "ok", pid: process.pid, ...deps.health() }));
  registerChatCompletions(app, deps);
  registerPassthrough(app, deps.upstream);
  return app;
}
