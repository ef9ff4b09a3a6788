import { AccessDeniedError, type AccessPolicy } from "@holdfast/access";
import { type Analytics, listRuns, QueryError, RUN_STATUSES, runSql } from "@holdfast/analytics";
import {
  guardListener,
  type HttpLimitsConfig,
  limitErrorOf,
  listenerOptions,
  METRICS_CONTENT_TYPE,
} from "@holdfast/http";
import type { Logger } from "@holdfast/log";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyRequest,
  LogController,
} from "fastify";
import type { ProjectorStatus } from "./projector.js";

export interface AnalyticsApiDeps {
  analytics: Analytics;
  /** Who may query: the control tokens (control.read_token or control.token), when set. */
  access: AccessPolicy;
  log: Logger;
  /** Timeouts, header count and JSON depth (the `http` section). */
  limits: HttpLimitsConfig;
  status: () => ProjectorStatus & { streamLastSeq: number };
  /** What `GET /metrics` answers: the process's metrics in Prometheus's text format. */
  metrics: () => string;
}

const MAX_LIST = 10_000;

/** The largest body the API takes: one SQL statement. */
export const MAX_BODY_BYTES = 1_048_576;

/**
 * The projector's HTTP API: operator SQL over the projection and the named read models.
 * With embedded ClickHouse the engine lives in this process, so every reader goes
 * through here. /health answers liveness to anyone, and its details (lag, the lease
 * holder, the pid) like the rest (/metrics too) only with a control token (read-only or
 * not) when one is configured. Errors are `{"error": {"code", "message"}}`.
 */
export function buildAnalyticsApi(deps: AnalyticsApiDeps): FastifyInstance {
  const logger: FastifyBaseLogger = deps.log;
  const app = Fastify({
    ...listenerOptions(deps.limits, {
      bodyLimit: MAX_BODY_BYTES,
      errorBody: ({ code, message }) => ({ error: { code, message } }),
    }),
    loggerInstance: logger,
    logController: new LogController({ disableRequestLogging: true }),
  });
  guardListener(app, deps.limits, { json: true });
  // Checked before the body is read: a caller without a token learns nothing else.
  const reader = {
    onRequest: async (request: FastifyRequest) => {
      deps.access.authorize(request.headers.authorization, "read");
    },
  };

  app.setErrorHandler((error, request, reply) => {
    const limit = limitErrorOf(error, MAX_BODY_BYTES);
    if (limit !== undefined) {
      return reply.code(limit.status).send({ error: { code: limit.code, message: limit.message } });
    }
    if (error instanceof AccessDeniedError) {
      const status = error.reason === "unauthenticated" ? 401 : 403;
      return reply.code(status).send({ error: { code: error.reason, message: error.message } });
    }
    if (error instanceof QueryError)
      return reply.code(400).send({ error: { message: error.message, code: error.code } });
    // fastify's own refusals of the request (bad JSON, a wrong content type, a bad query).
    const status = (error as { statusCode?: number }).statusCode;
    if (status !== undefined && status >= 400 && status < 500) {
      return reply.code(status).send({ error: { message: (error as Error).message, code: "bad_request" } });
    }
    request.log.error({ err: error }, "analytics request failed");
    return reply.code(500).send({ error: { message: (error as Error).message, code: "internal" } });
  });

  app.get("/health", async (request) => {
    const s = deps.status();
    const status = s.running && s.lastError === null ? "ok" : "degraded";
    if (!deps.access.allows(request.headers.authorization, "read")) return { status };
    return {
      status,
      // One projector per consumer writes; the others stand by until its lease lapses.
      role: s.role,
      lease_holder: s.leaseHolder,
      pid: process.pid,
      projected_seq: s.projectedSeq,
      stream_last_seq: s.streamLastSeq,
      lag_events: Math.max(0, s.streamLastSeq - s.projectedSeq),
      events_projected: s.eventsProjected,
      // Events set aside instead of projected (see the quarantined_events view): the
      // projection went on past them.
      quarantined: s.quarantined,
      last_error: s.lastError,
    };
  });

  app.get("/metrics", reader, async (_request, reply) =>
    reply.type(METRICS_CONTENT_TYPE).send(deps.metrics()),
  );

  app.post<{ Body: { sql?: unknown; max_rows?: unknown } }>(
    "/v1/query",
    {
      ...reader,
      schema: {
        body: {
          type: "object",
          required: ["sql"],
          properties: {
            sql: { type: "string", minLength: 1 },
            max_rows: { type: "integer", minimum: 1 },
          },
        },
      },
    },
    async (request) => {
      const { sql, max_rows } = request.body as { sql: string; max_rows?: number };
      return runSql(deps.analytics, sql, { maxRows: max_rows });
    },
  );

  app.get<{ Querystring: { limit?: number; status?: (typeof RUN_STATUSES)[number] } }>(
    "/v1/runs",
    {
      ...reader,
      schema: {
        querystring: {
          type: "object",
          properties: {
            limit: { type: "integer", minimum: 1, maximum: MAX_LIST },
            status: { type: "string", enum: [...RUN_STATUSES] },
          },
        },
      },
    },
    async (request) => ({
      runs: await listRuns(deps.analytics, {
        limit: request.query.limit ?? 100,
        status: request.query.status,
      }),
    }),
  );

  return app;
}
