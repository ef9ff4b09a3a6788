import { emptySelector, type RunView, type WindowLimits } from "@holdfast/events";
import {
  type ErrorToStatus,
  Metadata,
  type ServedService,
  type ServerUnaryCall,
  unary,
} from "@holdfast/grpc";
import {
  AffectedRun,
  CompactionMode,
  ControlHoldRule,
  type ControlRunRow,
  ControlRunView,
  type ControlServer,
  ControlService,
  type GateDecisionRequest,
  GateDecisionResponse,
  type Target as ProtoTarget,
} from "@holdfast/proto";
import type { Access, AccessPolicy } from "../access/tokens.js";
import { asControlError, InvalidArgumentError } from "../errors.js";
import type { ControlOperations, GateRequest, GateResult, RuleView } from "../runs/operations.js";
import type { ProjectedRun } from "../runs/sources.js";
import { type ActionRequest, checkReason, checkRunId, checkSelector, listQuery } from "../runs/target.js";

export interface ControlGrpcDeps {
  operations: ControlOperations;
  access: AccessPolicy;
}

/** The one mapping of the service's errors onto gRPC status codes (errors.ts holds the codes). */
const toStatus: ErrorToStatus = (error) => {
  const known = asControlError(error);
  const metadata = new Metadata();
  metadata.set("holdfast-error-code", known.code);
  return { code: known.grpcStatus, details: known.message, metadata };
};

/**
 * `holdfast.v1.Control` over the same operations as the REST API. The token comes in the
 * `authorization` metadata, `Bearer <token>`, and is checked before the request is read.
 */
export function controlGrpcService(deps: ControlGrpcDeps): ServedService {
  const { operations } = deps;
  const authorize = (call: ServerUnaryCall<unknown, unknown>, need: Access) => {
    const [value] = call.metadata.get("authorization");
    return deps.access.authorize(typeof value === "string" ? value : value?.toString("utf8"), need);
  };
  const implementation: ControlServer = {
    listRuns: unary(async (request, call) => {
      authorize(call, "read");
      const query = listQuery({
        ...(request.status === "" ? {} : { status: request.status }),
        ...(request.limit === 0 ? {} : { limit: String(request.limit) }),
      });
      return { runs: (await operations.listRuns(query)).map(runRow) };
    }, toStatus),
    getRun: unary(async (request, call) => {
      authorize(call, "read");
      return { run: runView((await operations.getRun(request.runId)).view) };
    }, toStatus),
    getStep: unary(async (request, call) => {
      authorize(call, "read");
      const { view, snapshot } = await operations.getStep(request.runId, request.step);
      const { request: asked, answer } = snapshot;
      return {
        runId: request.runId,
        step: view.step,
        stepId: view.stepId,
        api: view.api,
        model: view.model,
        status: view.status,
        request: Buffer.from(asked?.forwardedText ?? "", "utf8"),
        ...(asked?.clientText === undefined ? {} : { clientRequest: Buffer.from(asked.clientText, "utf8") }),
        answer: Buffer.from(answer?.text ?? "", "utf8"),
        answerStreamed: answer?.events !== undefined,
        answerStatus: answer?.status ?? 0,
        redactedPieces: (asked?.redacted ?? 0) + (answer?.redacted ?? 0),
        missing: [...snapshot.missing],
      };
    }, toStatus),
    hold: unary(async (request, call) => {
      const actor = authorize(call, "change");
      const result = await operations.hold(action(request.target, undefined), actor);
      return {
        runs: result.runs.map((run) => AffectedRun.fromPartial(run)),
        rule: result.rule === null ? undefined : holdRule(result.rule),
        ruleCreated: result.ruleCreated,
      };
    }, toStatus),
    resume: unary(async (request, call) => {
      const actor = authorize(call, "change");
      const compact = compactOf(request.compact);
      const result = await operations.resume({ ...action(request.target, request.limits), compact }, actor);
      return {
        runs: result.runs.map((run) => AffectedRun.fromPartial(run)),
        liftedRules: result.liftedRules.map(holdRule),
      };
    }, toStatus),
    stop: unary(async (request, call) => {
      const actor = authorize(call, "change");
      const result = await operations.stop(action(request.target, undefined), actor);
      return { runs: result.runs.map((run) => AffectedRun.fromPartial(run)) };
    }, toStatus),
    listWindows: unary(async (_request, call) => {
      authorize(call, "read");
      return { windows: await operations.listWindows(Date.now()) };
    }, toStatus),
    listRules: unary(async (_request, call) => {
      authorize(call, "read");
      return { rules: (await operations.listRules()).map(holdRule) };
    }, toStatus),
    approve: unary(async (request, call) => {
      const actor = authorize(call, "change");
      return gateResponse(await operations.approve(gateRequest(request), actor));
    }, toStatus),
    deny: unary(async (request, call) => {
      const actor = authorize(call, "change");
      return gateResponse(await operations.deny(gateRequest(request), actor));
    }, toStatus),
    liftRule: unary(async (request, call) => {
      const actor = authorize(call, "change");
      return {
        rule: holdRule(await operations.liftRule(request.ruleId, checkReason(request.reason), actor)),
      };
    }, toStatus),
  };
  return { definition: ControlService, implementation };
}

function action(target: ProtoTarget | undefined, limits: WindowLimits | undefined): ActionRequest {
  const chosen = target?.target;
  if (chosen === undefined) throw new InvalidArgumentError("give a target: a run_id or a selector");
  return {
    target:
      chosen.$case === "runId"
        ? { runId: chosen.value }
        : { selector: checkSelector({ ...emptySelector(), ...chosen.value }) },
    reason: checkReason(target?.reason ?? ""),
    limits: windowLimits(limits),
  };
}

/** A resume's compaction: none, truncate or summarize; any other value is refused. */
function compactOf(mode: CompactionMode): CompactionMode | undefined {
  if (mode === CompactionMode.COMPACTION_MODE_UNSPECIFIED) return undefined;
  if (mode === CompactionMode.COMPACTION_MODE_TRUNCATE || mode === CompactionMode.COMPACTION_MODE_SUMMARIZE)
    return mode;
  throw new InvalidArgumentError("compact must be COMPACTION_MODE_SUMMARIZE or COMPACTION_MODE_TRUNCATE");
}

function gateRequest(request: GateDecisionRequest): GateRequest {
  return {
    runId: checkRunId(request.runId),
    gateId: request.gateId === "" ? undefined : request.gateId,
    reason: checkReason(request.reason),
  };
}

function gateResponse(result: GateResult): GateDecisionResponse {
  return GateDecisionResponse.fromPartial({
    run: AffectedRun.fromPartial(result.run),
    gates: result.gates,
  });
}

function windowLimits(limits: WindowLimits | undefined): WindowLimits | undefined {
  if (limits === undefined) return undefined;
  const values = [limits.maxSteps, limits.maxCostNanoUsd, limits.maxMinutes, limits.maxTokensPerMinute];
  if (values.some((v) => v < 0)) throw new InvalidArgumentError("limits must not be negative");
  return values.every((v) => v === 0) ? undefined : limits;
}

function holdRule(rule: RuleView): ControlHoldRule {
  return ControlHoldRule.fromPartial(rule);
}

function runRow(row: ProjectedRun): ControlRunRow {
  return {
    runId: row.run_id,
    tag: row.tag,
    tenant: row.tenant,
    model: row.model,
    status: row.status,
    holdReason: row.hold_reason,
    heldSince: row.held_since ?? "",
    parkedCalls: Number(row.parked_calls),
    steps: Number(row.steps),
    inFlight: Number(row.in_flight),
    completed: Number(row.completed),
    failed: Number(row.failed),
    inputTokens: Number(row.input_tokens),
    outputTokens: Number(row.output_tokens),
    costUsd: Number(row.cost_usd),
    unpricedSteps: Number(row.unpriced_steps),
    firstSeen: row.first_seen,
    lastSeen: row.last_seen,
  };
}

function runView(view: RunView): ControlRunView {
  const hold = view.hold;
  return ControlRunView.fromPartial({
    runId: view.runId,
    status: view.status,
    hold: hold === null ? undefined : { ...hold, trip: hold.trip ?? undefined },
    tag: view.tag,
    tenant: view.tenant,
    model: view.model,
    promptHash: view.promptHash,
    windowStartedMs: view.window.startedMs,
    windowSteps: view.window.steps,
    windowCostNanoUsd: view.window.costNanoUsd,
    windowLimits: view.window.limits ?? undefined,
    parked: view.parked,
    control: view.control.map((entry) => ({
      ...entry,
      trip: entry.trip ?? undefined,
      limits: entry.limits ?? undefined,
    })),
    steps: view.steps.map((step) => ({
      stepId: step.stepId,
      step: step.step,
      status: step.status,
      api: step.api,
      model: step.model,
      stream: step.stream,
      startedMs: step.startedMs,
      finishedMs: step.finishedMs ?? 0,
      upstreamStatus: step.upstreamStatus ?? 0,
      inputTokens: step.inputTokens,
      cachedInputTokens: step.cachedInputTokens,
      outputTokens: step.outputTokens,
      costKnown: step.costNanoUsd !== null,
      costNanoUsd: step.costNanoUsd ?? 0,
      estimated: step.estimated,
      latencyMs: step.latencyMs ?? 0,
      finishReason: step.finishReason,
      toolCalls: step.toolCalls,
      failureReason: step.failure?.reason ?? "",
      failureMessage: step.failure?.message ?? "",
    })),
    inFlight: view.inFlight,
    completed: view.completed,
    failed: view.failed,
    inputTokens: view.totals.inputTokens,
    outputTokens: view.totals.outputTokens,
    costNanoUsd: view.totals.costNanoUsd,
    unpricedSteps: view.totals.unpricedSteps,
    firstSeenMs: view.firstSeenMs ?? 0,
    lastSeenMs: view.lastSeenMs ?? 0,
    gates: view.gates.map((gate) => ({ ...gate, decidedMs: gate.decidedMs ?? 0 })),
  });
}
