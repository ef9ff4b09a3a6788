import { type Access, AccessDeniedError, type AccessPolicy } from "@holdfast/access";
import { type Actor, agentViewJson, durableRunJson } from "@holdfast/events";
import {
  guardListener,
  type HttpLimitsConfig,
  jsonDepthExceeds,
  limitErrorOf,
  listenerOptions,
  METRICS_CONTENT_TYPE,
} from "@holdfast/http";
import type { Logger } from "@holdfast/log";
import { type DurableRun, DurableStatus, durableStatusFromJSON } from "@holdfast/proto";
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from "fastify";
import {
  InvalidArgumentError,
  PermissionDeniedError,
  toSchedulerError,
  UnauthenticatedError,
} from "../errors.js";
import type { RunsOperations } from "../runs/operations.js";

export interface RunsHttpDeps {
  operations: RunsOperations;
  access: AccessPolicy;
  log: Logger;
  /** Timeouts, header count and JSON depth (the `http` section). */
  limits: HttpLimitsConfig;
  /** What `GET /holdfast/health` reports besides "ok", to a caller who may read (the pid, the queue's counts). */
  health: () => Record<string, unknown>;
  /** What `GET /holdfast/metrics` answers: the process's metrics in Prometheus's text format. */
  metrics: () => string;
}

/** The largest body the REST API takes: a run's input (at most 1 MB of JSON) with room to spare. */
export const MAX_BODY_BYTES = 2_000_000;

/**
 * The durable-run API over REST, beside gRPC's holdfast.v1.Runs:
 *
 *   POST /v1/agents/{agent}/runs         submit ({input, partition_key, timeout_seconds, idempotency_key, tenant, tag})
 *   GET  /v1/runs/{id}                   one run and its steps
 *   GET  /v1/runs?agent=&status=&limit=  runs, newest first
 *   POST /v1/runs/{id}/cancel|redrive|replay   ({reason})
 *   GET  /v1/agents                      deployed agents
 *   POST /v1/agents/{agent}/deployments  deploy ({version, max_duration_seconds, concurrency_per_key, rate_limit})
 *   GET  /holdfast/health                liveness to anyone; the pid and counts to a reader
 *   GET  /holdfast/metrics               Prometheus's text format (a reader's)
 *
 * Bodies and answers are JSON with snake_case keys; errors are {"error": {"code", "message"}}.
 */
export function buildRunsApp(deps: RunsHttpDeps): FastifyInstance {
  const { operations } = deps;
  const app = Fastify({
    ...listenerOptions(deps.limits, {
      bodyLimit: MAX_BODY_BYTES,
      errorBody: ({ code, message }) => ({ error: { code, message } }),
    }),
    loggerInstance: deps.log as FastifyBaseLogger,
    disableRequestLogging: true,
  });
  guardListener(app, deps.limits, { json: true });
  const authorize = (request: FastifyRequest, need: Access): Actor => {
    try {
      return deps.access.authorize(request.headers.authorization, need);
    } catch (error) {
      if (!(error instanceof AccessDeniedError)) throw error;
      throw error.reason === "unauthenticated"
        ? new UnauthenticatedError(error.message)
        : new PermissionDeniedError(error.message);
    }
  };
  app.setErrorHandler((error, request, reply) => {
    // Past a limit of the listener (headers, body size, JSON depth): its own status and code.
    const limit = limitErrorOf(error, MAX_BODY_BYTES);
    if (limit !== undefined) {
      return reply.code(limit.status).send({ error: { code: limit.code, message: limit.message } });
    }
    const fastifyCode = (error as { code?: string }).code;
    if (fastifyCode === "FST_ERR_CTP_INVALID_JSON_BODY" || fastifyCode === "FST_ERR_CTP_EMPTY_JSON_BODY") {
      return reply.code(400).send({ error: { code: "invalid_argument", message: (error as Error).message } });
    }
    const known = toSchedulerError(error);
    if (known.httpStatus >= 500) request.log.warn({ err: error }, "runs API call failed");
    return reply.code(known.httpStatus).send({ error: { code: known.code, message: known.message } });
  });
  app.setNotFoundHandler((request, reply) =>
    reply
      .code(404)
      .send({ error: { code: "unknown_url", message: `no ${request.method} ${request.url.split("?")[0]}` } }),
  );
  app.get("/holdfast/health", async (request) =>
    deps.access.allows(request.headers.authorization, "read")
      ? { status: "ok", ...deps.health() }
      : { status: "ok" },
  );
  app.get("/holdfast/metrics", async (request, reply) => {
    authorize(request, "read");
    return reply.type(METRICS_CONTENT_TYPE).send(deps.metrics());
  });

  // A stored input or output nested deeper than a request may be (a worker's output, over
  // gRPC, could be) is shown as its text: serializing it would overflow the stack.
  const show = (run: DurableRun) =>
    durableRunJson(run, (value) => jsonDepthExceeds(value, deps.limits.max_json_depth));
  app.post<{ Params: { agent: string }; Body: Record<string, unknown> | undefined }>(
    "/v1/agents/:agent/runs",
    async (request, reply) => {
      const actor = authorize(request, "change");
      const body = objectBody(request.body);
      const { run, created } = await operations.submit(
        {
          agent: request.params.agent,
          inputJson: body.input === undefined ? "null" : JSON.stringify(body.input),
          partitionKey: stringField(body, "partition_key"),
          timeoutSeconds: numberField(body, "timeout_seconds"),
          idempotencyKey:
            stringField(body, "idempotency_key") || String(request.headers["idempotency-key"] ?? ""),
          tenant: stringField(body, "tenant"),
          tag: stringField(body, "tag"),
        },
        actor,
      );
      return reply.code(created ? 201 : 200).send({ run: show(run), created });
    },
  );
  app.get<{ Params: { id: string } }>("/v1/runs/:id", async (request) => {
    authorize(request, "read");
    return { run: show(await operations.get(request.params.id)) };
  });
  app.get<{ Querystring: { agent?: string; status?: string; limit?: string } }>(
    "/v1/runs",
    async (request) => {
      authorize(request, "read");
      const { agent = "", status = "", limit = "" } = request.query;
      const parsedStatus =
        status === ""
          ? DurableStatus.DURABLE_STATUS_UNSPECIFIED
          : durableStatusFromJSON(`DURABLE_STATUS_${status.toUpperCase()}`);
      if (parsedStatus === DurableStatus.UNRECOGNIZED) {
        throw new InvalidArgumentError("status must be queued, running, held, finished or failed");
      }
      const runs = await operations.list({
        agent,
        status: parsedStatus,
        limit: limit === "" ? 0 : Number(limit) || 0,
      });
      return { runs: runs.map(show) };
    },
  );
  for (const action of ["cancel", "redrive", "replay"] as const) {
    app.post<{ Params: { id: string }; Body: Record<string, unknown> | undefined }>(
      `/v1/runs/:id/${action}`,
      async (request) => {
        const actor = authorize(request, "change");
        const reason = stringField(objectBody(request.body), "reason");
        return { run: show(await operations[action](request.params.id, actor, reason)) };
      },
    );
  }
  app.get("/v1/agents", async (request) => {
    authorize(request, "read");
    return { agents: operations.agents().map((a) => agentViewJson(a)) };
  });
  app.post<{ Params: { agent: string }; Body: Record<string, unknown> | undefined }>(
    "/v1/agents/:agent/deployments",
    async (request) => {
      const actor = authorize(request, "change");
      const body = objectBody(request.body);
      const result = await operations.deploy(
        {
          agent: request.params.agent,
          version: stringField(body, "version"),
          maxDurationSeconds: numberField(body, "max_duration_seconds"),
          concurrencyPerKey: numberField(body, "concurrency_per_key"),
          rateLimit: stringField(body, "rate_limit"),
        },
        actor,
      );
      return {
        agent: agentViewJson(result.agent),
        changes: result.changes,
        previous_version: result.previousVersion,
      };
    },
  );
  return app;
}

function objectBody(body: unknown): Record<string, unknown> {
  if (body === undefined || body === null) return {};
  if (typeof body !== "object" || Array.isArray(body))
    throw new InvalidArgumentError("the body must be a JSON object");
  return body as Record<string, unknown>;
}

function stringField(body: Record<string, unknown>, name: string): string {
  const value = body[name];
  if (value === undefined || value === null) return "";
  if (typeof value !== "string") throw new InvalidArgumentError(`${name} must be a string`);
  return value;
}

function numberField(body: Record<string, unknown>, name: string): number {
  const value = body[name];
  if (value === undefined || value === null) return 0;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) {
    throw new InvalidArgumentError(`${name} must be a whole number, 0 or more`);
  }
  return value;
}
