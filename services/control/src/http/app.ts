import { type Actor, runViewJson, type Selector } from "@holdfast/events";
import {
  guardListener,
  type HttpLimitsConfig,
  limitErrorOf,
  listenerOptions,
  METRICS_CONTENT_TYPE,
} from "@holdfast/http";
import type { Logger } from "@holdfast/log";
import { stepJson } from "@holdfast/snapshots";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyRequest,
  LogController,
} from "fastify";
import type { Access, AccessPolicy } from "../access/tokens.js";
import { asControlError, ControlError, errorBody, InvalidArgumentError, NotFoundError } from "../errors.js";
import type { AffectedRun, ControlOperations, RuleView } from "../runs/operations.js";
import { checkReason, gateAction, listQuery, runAction, selectorAction } from "../runs/target.js";

export interface ControlAppDeps {
  operations: ControlOperations;
  access: AccessPolicy;
  log: Logger;
  /** Timeouts, header count and JSON depth (the `http` section). */
  limits: HttpLimitsConfig;
  /** What `GET /holdfast/v1/health` reports besides "ok", to a caller who may read (the pid, NATS, quarantined events). */
  health: () => Record<string, unknown>;
  /** What `GET /holdfast/v1/metrics` answers: the process's metrics in Prometheus's text format. */
  metrics: () => string;
}

export const API_PREFIX = "/holdfast/v1";

/** The largest body a control request has: a selector and a reason. */
export const MAX_BODY_BYTES = 64 * 1024;

/**
 * The control REST API under /holdfast/v1/. Every route but health (whose details do) needs a token when
 * control.token is set; changes need the control token. Errors are `{"error": {"code",
 * "message"}}` with the status errors.ts gives their class.
 */
export function buildApp(deps: ControlAppDeps): FastifyInstance {
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
  const { operations } = deps;
  const actors = new WeakMap<FastifyRequest, Actor>();
  // Checked before the body is read: a caller without the right token learns nothing else.
  const needs = (access: Access) => ({
    onRequest: async (request: FastifyRequest) => {
      actors.set(request, deps.access.authorize(request.headers.authorization, access));
    },
  });
  const actorOf = (request: FastifyRequest): Actor => actors.get(request)!;

  app.setErrorHandler((error, request, reply) => {
    // Past a limit of the listener (headers, body size, JSON depth): its own status and code.
    const limit = limitErrorOf(error, MAX_BODY_BYTES);
    if (limit !== undefined) {
      return reply.code(limit.status).send({ error: { code: limit.code, message: limit.message } });
    }
    const status = (error as { statusCode?: number }).statusCode;
    // fastify's own refusals of the request (bad JSON, a wrong content type, too large).
    if (!(error instanceof ControlError) && status !== undefined && status >= 400 && status < 500) {
      return reply.code(status).send(errorBody(new InvalidArgumentError((error as Error).message)));
    }
    const known = asControlError(error);
    if (known.httpStatus >= 500) request.log.error({ err: error }, "control request failed");
    return reply.code(known.httpStatus).send(errorBody(known));
  });
  app.setNotFoundHandler((request, reply) =>
    reply
      .code(404)
      .send(errorBody(new NotFoundError(`no route ${request.method} ${request.url.split("?")[0]}`))),
  );

  // Liveness to anyone (a probe has no token); the process's details to a reader only.
  app.get(`${API_PREFIX}/health`, async (request) =>
    deps.access.allows(request.headers.authorization, "read")
      ? { status: "ok", ...deps.health() }
      : { status: "ok" },
  );
  app.get(`${API_PREFIX}/metrics`, needs("read"), async (_request, reply) =>
    reply.type(METRICS_CONTENT_TYPE).send(deps.metrics()),
  );

  app.get(`${API_PREFIX}/runs`, needs("read"), async (request) => ({
    runs: await operations.listRuns(listQuery(request.query)),
  }));

  app.get<{ Params: { id: string } }>(`${API_PREFIX}/runs/:id`, needs("read"), async (request) => {
    const { view, durable } = await operations.getRun(request.params.id);
    return { run: runViewJson(view, durable) };
  });

  app.get<{ Params: { id: string; n: string } }>(
    `${API_PREFIX}/runs/:id/steps/:n`,
    needs("read"),
    async (request) => {
      const { n } = request.params;
      if (!/^[0-9]{1,9}$/.test(n))
        throw new InvalidArgumentError(`a step is a number from 1 (got ${JSON.stringify(n)})`);
      const { view, snapshot } = await operations.getStep(request.params.id, Number(n));
      return { step: stepJson(request.params.id, view, snapshot) };
    },
  );

  app.post<{ Params: { id: string } }>(`${API_PREFIX}/runs/:id/hold`, needs("change"), async (request) =>
    holdBody(await operations.hold(runAction(request.params.id, request.body, false), actorOf(request))),
  );
  app.post<{ Params: { id: string } }>(`${API_PREFIX}/runs/:id/resume`, needs("change"), async (request) =>
    resumeBody(await operations.resume(runAction(request.params.id, request.body, true), actorOf(request))),
  );
  app.post<{ Params: { id: string } }>(`${API_PREFIX}/runs/:id/stop`, needs("change"), async (request) =>
    stopBody(await operations.stop(runAction(request.params.id, request.body, false), actorOf(request))),
  );

  app.post<{ Params: { id: string } }>(`${API_PREFIX}/runs/:id/approve`, needs("change"), async (request) =>
    gateBody(await operations.approve(gateAction(request.params.id, request.body), actorOf(request))),
  );
  app.post<{ Params: { id: string } }>(`${API_PREFIX}/runs/:id/deny`, needs("change"), async (request) =>
    gateBody(await operations.deny(gateAction(request.params.id, request.body), actorOf(request))),
  );

  app.post(`${API_PREFIX}/hold`, needs("change"), async (request) =>
    holdBody(await operations.hold(selectorAction(request.body, false), actorOf(request))),
  );
  app.post(`${API_PREFIX}/resume`, needs("change"), async (request) =>
    resumeBody(await operations.resume(selectorAction(request.body, true), actorOf(request))),
  );
  app.post(`${API_PREFIX}/stop`, needs("change"), async (request) =>
    stopBody(await operations.stop(selectorAction(request.body, false), actorOf(request))),
  );

  app.get(`${API_PREFIX}/windows`, needs("read"), async () => ({
    windows: (await operations.listWindows(Date.now())).map((window) => ({
      key_id: window.keyId,
      upstream: window.upstream,
      gateway: window.gateway,
      observed_at: isoTime(window.observedAtMs),
      cooldown_until: window.cooldownUntilMs > 0 ? isoTime(window.cooldownUntilMs) : null,
      dimensions: window.dimensions.map((d) => ({
        dimension: d.dimension,
        limit: d.limit,
        remaining_read: d.remainingRead,
        remaining_now: d.remainingNow,
        shape: d.shape,
        shape_readings: d.shapeReadings,
        reset_at: d.resetAtMs > 0 ? isoTime(d.resetAtMs) : null,
      })),
    })),
  }));

  app.get(`${API_PREFIX}/rules`, needs("read"), async () => ({
    rules: (await operations.listRules()).map(ruleBody),
  }));

  app.delete<{ Params: { id: string }; Querystring: { reason?: string } }>(
    `${API_PREFIX}/rules/:id`,
    needs("change"),
    async (request) => {
      const reason = checkReason(typeof request.query.reason === "string" ? request.query.reason : "");
      return { rule: ruleBody(await operations.liftRule(request.params.id, reason, actorOf(request))) };
    },
  );

  return app;
}

// Bodies are snake_case like the projector's rows; a run (`GET runs/:id`) is `holdfast show --json` (runViewJson).

function runsBody(runs: AffectedRun[]) {
  return runs.map((run) => ({ run_id: run.runId, changed: run.changed, status: run.status }));
}

export function selectorBody(selector: Selector) {
  return {
    run: selector.runGlob,
    tag: selector.tag,
    model: selector.modelPrefix,
    prompt: selector.promptHash,
    status: selector.status,
    all: selector.all,
  };
}

function ruleBody(rule: RuleView) {
  return {
    rule_id: rule.ruleId,
    selector: selectorBody(rule.selector),
    description: rule.description,
    actor: rule.actor,
    reason: rule.reason,
    added_at: new Date(rule.addedMs).toISOString(),
  };
}

function holdBody(result: Awaited<ReturnType<ControlOperations["hold"]>>) {
  return {
    runs: runsBody(result.runs),
    rule: result.rule === null ? null : ruleBody(result.rule),
    rule_created: result.ruleCreated,
  };
}

function resumeBody(result: Awaited<ReturnType<ControlOperations["resume"]>>) {
  return { runs: runsBody(result.runs), lifted_rules: result.liftedRules.map(ruleBody) };
}

function gateBody(result: Awaited<ReturnType<ControlOperations["approve"]>>) {
  return {
    run: runsBody([result.run])[0],
    gates: result.gates.map((gate) => ({
      gate_id: gate.gateId,
      step_id: gate.stepId,
      step: gate.step,
      kind: gate.kind,
      tool: gate.tool,
      rule: gate.rule,
      decision: gate.decision,
    })),
  };
}

function stopBody(result: Awaited<ReturnType<ControlOperations["stop"]>>) {
  return { runs: runsBody(result.runs) };
}

/** A time as RFC 3339, or null for a figure a reading held that is no date at all. */
function isoTime(ms: number): string | null {
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? null : date.toISOString();
}
