import type { IncomingMessage } from "node:http";
import {
  guardListener,
  HttpLimitError,
  type HttpLimitsConfig,
  listenerOptions,
  METRICS_CONTENT_TYPE,
} from "@holdfast/http";
import type { Logger } from "@holdfast/log";
import type { ApiShape, ErrorFields } from "@holdfast/providers";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from "fastify";
import { GatewayError } from "./errors.js";
import { decodedBody, UnsupportedContentEncodingError } from "./http/body.js";
import { normalizeTarget } from "./http/path.js";
import type { PipelineDeps } from "./pipeline/call.js";
import { type GatewayFeature, shared } from "./pipeline/hooks.js";
import { pipelineRoutes, shapeForPath } from "./pipeline/routes.js";
import { type PassthroughDeps, passthrough } from "./proxy/passthrough.js";
import { authenticate } from "./tenants/authenticate.js";
import type { TenantKeys } from "./tenants/keys.js";
import type { Upstreams } from "./upstream/upstream.js";

export interface GatewayAppDeps extends Omit<PipelineDeps, "maxJsonDepth"> {
  /** Holds and stops, as the passed-through calls that name a run meet them. */
  admission: PassthroughDeps["admission"];
  log: Logger;
  maxBodyBytes: number;
  /** Timeouts, header count and JSON depth (the `http` section). */
  limits: HttpLimitsConfig;
  upstreams: Upstreams;
  /** What /holdfast/health and /holdfast/metrics answer. */
  health: GatewayHealth;
  /** Features that decide at the pipeline's hooks (limits, holds, the tool-call gate, …). */
  features?: readonly GatewayFeature[];
  /** The tenants' gateway keys, with `tenants` configured: every /v1/* call must carry one. */
  tenantKeys?: TenantKeys;
  /** The paths passed through: `gateway.passthrough`, and the run a call names (if any). */
  passthrough: Pick<PassthroughDeps, "mode" | "runOf">;
}

/**
 * `/holdfast/health`: liveness for anyone (a load balancer's probe, an agent with its
 * provider key), the process's details only for a caller allowed to read them.
 */
export interface GatewayHealth {
  /** False while the event log is unreachable: calls are refused, so the gateway is not up. */
  live(): boolean;
  /** The pid, the runs cached and held, the fleet as this gateway sees it. */
  details(): Record<string, unknown>;
  /** Whether a request with this Authorization header may see the details (and the metrics). */
  mayRead(authorization: string | undefined): boolean;
  /** The process's metrics in Prometheus's text format (`/holdfast/metrics`, for a reader only). */
  metrics(): string;
}

/**
 * The gateway's HTTP surface: one pipeline for every provider API shape, everything else
 * under /v1 passed through. Every error is answered in the shape of the API the client
 * called, so its SDK raises it as it would the provider's own.
 */
export function buildApp(deps: GatewayAppDeps): FastifyInstance {
  const logger: FastifyBaseLogger = deps.log;
  // Why a request target was refused, for the route that answers it (set before routing).
  const refusedTargets = new WeakMap<IncomingMessage, string>();
  let closing = false;
  const app = Fastify({
    // Timeouts, the body limit, and requests Node's parser refuses (malformed header bytes,
    // headers too large, too slow) answered in the provider's shape of the path they asked.
    ...listenerOptions(deps.limits, {
      bodyLimit: deps.maxBodyBytes,
      errorBody: (answer, path) => shapeForPath(path).errorBody(answer.message, { code: answer.code }),
    }),
    // One spelling per path before routing: every spelling of a metered endpoint is metered.
    rewriteUrl(req) {
      const target = normalizeTarget(req.url ?? "/");
      if (target.ok) return target.url;
      refusedTargets.set(req, target.message);
      return REFUSED_TARGET;
    },
    loggerInstance: logger,
    // One log line per model call would cost more than the proxying; errors are logged.
    // Nor does a call get a child logger of its own (a pino child per request is a
    // measurable share of the gateway's CPU): errors log with the call's run, not its req id.
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: (parent) => parent,
    // Answered below, in the provider's shape.
    return503OnClosing: false,
  });

  // More headers than http.max_headers is a 431, so the run headers are read among all of them.
  guardListener(app, deps.limits, { json: false });
  app.addHook("preClose", async () => {
    closing = true;
  });
  // Hooks on every call take a callback, not a promise: one less promise and microtask
  // hop per call on the hot path.
  app.addHook("onRequest", (request, reply, done) => {
    if (!closing) return done();
    answer(
      request,
      reply.header("connection", "close"),
      503,
      "This Holdfast gateway is shutting down; retry on another or in a moment.",
      {
        type: "server_error",
        code: "holdfast_shutting_down",
      },
    );
  });
  // The raw bytes are kept: a request is forwarded exactly as the client sent it.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_request, body, done) => done(null, body));
  // A compressed request body is decoded here, so it is read, metered and forwarded like any other.
  app.addHook("preParsing", (request, _reply, payload, done) => {
    const encoding = request.headers["content-encoding"];
    if (encoding === undefined) return done(null, payload);
    try {
      done(null, decodedBody(payload, encoding));
    } catch (error) {
      done(error as Error);
    }
  });

  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof GatewayError) {
      if (error.status >= 500) request.log.warn({ err: error }, "call not completed");
      // A stop's x-should-retry: false, a full parking's retry-after.
      return answer(request, reply.headers(error.headers), error.status, error.message, error);
    }
    if (error instanceof HttpLimitError) return answer(request, reply, error.status, error.message, error);
    if (error instanceof UnsupportedContentEncodingError) {
      return answer(request, reply, 415, error.message, { code: "unsupported_content_encoding" });
    }
    if (error.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
      return answer(
        request,
        reply,
        413,
        `The request body is larger than ${deps.maxBodyBytes} bytes, the most this gateway accepts (gateway.max_body_bytes).`,
        { code: "request_too_large" },
      );
    }
    if (error.statusCode !== undefined && error.statusCode < 500) {
      return answer(request, reply, error.statusCode, error.message, { code: error.code ?? null });
    }
    request.log.error({ err: error }, "unexpected gateway error");
    return answer(request, reply, 500, "Holdfast failed while handling this call.", {
      type: "server_error",
      code: "holdfast_error",
    });
  });

  app.setNotFoundHandler((request, reply) =>
    answer(request, reply, 404, `Holdfast does not serve ${request.method} ${request.url.split("?")[0]}.`, {
      code: "unknown_url",
    }),
  );

  app.all(REFUSED_TARGET, async (request, reply) =>
    answer(
      request,
      reply,
      400,
      refusedTargets.get(request.raw) ?? "The request path is not one Holdfast serves.",
      {
        code: "invalid_path",
      },
    ),
  );
  // The process answers: for a liveness probe, which must not restart a gateway (and drop
  // its parked calls and streams) while NATS is away; /holdfast/health says whether it can
  // serve (readiness).
  app.get("/holdfast/live", async () => ({ status: "ok" }));
  app.get("/holdfast/health", async (request, reply) => {
    const live = deps.health.live();
    const status = live ? "ok" : "log_unreachable";
    return reply
      .code(live ? 200 : 503)
      .send(
        deps.health.mayRead(request.headers.authorization)
          ? { status, pid: process.pid, ...deps.health.details() }
          : { status },
      );
  });
  // Under /holdfast/, so no provider path is shadowed; a reader's only, like the health details.
  app.get("/holdfast/metrics", async (request, reply) => {
    if (!deps.health.mayRead(request.headers.authorization)) {
      return answer(
        request,
        reply,
        401,
        "The gateway's metrics need a token: send `Authorization: Bearer <token>` with control.read_token or control.token (with no token configured, they are served on loopback only).",
        { type: "authentication_error", code: "unauthenticated" },
      );
    }
    return reply.type(METRICS_CONTENT_TYPE).send(deps.health.metrics());
  });
  app.register(authenticate(deps.tenantKeys));
  app.register(pipelineRoutes({ ...deps, maxJsonDepth: deps.limits.max_json_depth }));
  for (const feature of deps.features ?? []) app.register(shared(feature));
  app.register(passthrough({ ...deps.passthrough, upstreams: deps.upstreams, admission: deps.admission }));
  return app;
}

const REFUSED_TARGET = "/holdfast/refused-target";

/** The shape whose error envelope this request's client parses. */
function shapeOf(request: FastifyRequest): ApiShape {
  return request.routeOptions.config?.shape ?? shapeForPath(request.raw.url ?? request.url);
}

function answer(
  request: FastifyRequest,
  reply: FastifyReply,
  status: number,
  message: string,
  fields: ErrorFields,
) {
  return reply.code(status).send(shapeOf(request).errorBody(message, fields));
}
