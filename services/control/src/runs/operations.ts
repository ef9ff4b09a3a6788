import {
  type Actor,
  actorName,
  describeRun,
  describeSelector,
  durableRunOf,
  FLEET,
  type FleetCommand,
  type FleetState,
  type HoldRule,
  matches,
  type RunCommand,
  type RunState,
  RunStatus,
  type RunView,
  runIdDefect,
  type Selector,
  type StepView,
  sameSelector,
  type WindowLimits,
} from "@holdfast/events";
import { shapesOfRecorded, WindowState } from "@holdfast/predict";
import type { DurableRun } from "@holdfast/proto";
import type { Ledger } from "@holdfast/runs";
import type { StepSnapshot } from "@holdfast/snapshots";
import { AnalyticsUnavailableError, InvalidArgumentError, NotFoundError } from "../errors.js";
import type { LogRuns, ProjectedRun, Projection } from "./sources.js";
import { type ActionRequest, checkRunId, MAX_LIST, ruleIdFor } from "./target.js";

/** A provider key's rate-limit window as gateways last read it, refilled to now. */
export interface KeyWindowView {
  keyId: string;
  upstream: string;
  gateway: string;
  observedAtMs: number;
  cooldownUntilMs: number;
  dimensions: {
    dimension: string;
    limit: number;
    remainingRead: number;
    remainingNow: number;
    resetAtMs: number;
    /** How the recording gateway took the window to refill, and from how many readings. */
    shape: string;
    shapeReadings: number;
  }[];
}

/** A run an action touched: `changed` is false when it already was as asked. */
export interface AffectedRun {
  runId: string;
  changed: boolean;
  status: string;
}

/** A standing hold rule as operators see it. */
export interface RuleView {
  ruleId: string;
  selector: Selector;
  /** The selector as typed: `--tag prod --model gpt-4o`. */
  description: string;
  actor: string;
  reason: string;
  addedMs: number;
}

export interface HoldResult {
  runs: AffectedRun[];
  /** By selector without a status: the standing rule for runs that have not called yet. */
  rule: RuleView | null;
  /** False when that rule was already in force. */
  ruleCreated: boolean;
}

export interface ResumeResult {
  runs: AffectedRun[];
  /** By selector: the rules with exactly this selector, lifted. */
  liftedRules: RuleView[];
}

export interface StopResult {
  runs: AffectedRun[];
}

/** A held answer an approval or denial decided. */
export interface DecidedGate {
  gateId: string;
  stepId: string;
  step: number;
  /** "gate" (a tool_gate rule) or "loop" (max_repeated_tool_calls). */
  kind: string;
  tool: string;
  rule: string;
  /** "approved" or "denied"; for an answer decided before, also "abandoned". */
  decision: string;
}

export interface GateResult {
  run: AffectedRun;
  gates: DecidedGate[];
}

/** Which held answers an approval or denial is about: one by gate id, or all the run's. */
export interface GateRequest {
  runId: string;
  gateId: string | undefined;
  reason: string;
}

export interface ControlOperationsDeps {
  runs: Ledger<RunState, RunCommand>;
  fleet: Ledger<FleetState, FleetCommand>;
  log: LogRuns;
  /** The projector's runs; undefined when none is configured (runs are then listed from the log). */
  projection: Projection | undefined;
  /** Runs acted on at once when a selector matches many. */
  concurrency?: number;
  /** A step's snapshot read back (the SNAPSHOT buckets). */
  snapshots: (runId: string, stepId: string) => Promise<StepSnapshot>;
}

const NO_LABELS = { tag: "", tenant: "" };

/**
 * What the control API does, whichever transport asked (REST or gRPC). Every change is a
 * command decided on the run (or the fleet) as the log has it, under its sequence check,
 * so the service keeps no state of its own and two control services can run side by side.
 */
export class ControlOperations {
  constructor(private readonly deps: ControlOperationsDeps) {}

  /** Runs as the projection has them (it may trail the log by up to projector.linger_ms). */
  async listRuns(options: { status?: string | undefined; limit: number }): Promise<ProjectedRun[]> {
    if (this.deps.projection === undefined) {
      throw new AnalyticsUnavailableError(
        "listing runs needs the projector's analytics API: set control.analytics_url (holdfast up sets it)",
      );
    }
    return this.deps.projection.runs(options);
  }

  /**
   * Step `n` of a run (its number as the run's steps are listed) with its snapshot: what
   * it asked and was answered, as `holdfast show <run> <n>` prints it.
   */
  async getStep(runId: string, n: number): Promise<{ view: StepView; snapshot: StepSnapshot }> {
    if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`a step is a number from 1 (got ${n})`);
    const { view: run } = await this.getRun(runId);
    const view = run.steps.find((s) => s.step === n);
    if (view === undefined) {
      throw new NotFoundError(`run ${JSON.stringify(runId)} has no step ${n} (it has ${run.steps.length})`);
    }
    return { view, snapshot: await this.deps.snapshots(runId, view.stepId) };
  }

  /** One run folded from its events in the log, as `holdfast show` sees it, with its durable part if it is a durable run. */
  async getRun(runId: string): Promise<{ view: RunView; durable: DurableRun | undefined }> {
    checkRunId(runId);
    const history = await this.deps.log.history(runId);
    if (history.events.length === 0 && history.quarantined.length === 0)
      throw new NotFoundError(`no run named ${JSON.stringify(runId)}`);
    return {
      view: describeRun(runId, history),
      durable: durableRunOf(
        runId,
        history.events.map((e) => e.envelope),
      ),
    };
  }

  /**
   * By id: hold the run (one that has not called yet is held at its first call). By
   * selector: a standing rule first (unless the selector names a status, which is about
   * runs as they are now), so every matching run is held at its next call even if listing
   * the current ones fails; then a hold on every run it matches now.
   */
  async hold(request: ActionRequest, actor: Actor): Promise<HoldResult> {
    const { target, reason } = request;
    if ("runId" in target) {
      const run = await this.execute(target.runId, { type: "HoldRun", actor, reason });
      return { runs: [run], rule: null, ruleCreated: false };
    }
    const selector = target.selector;
    let rule: RuleView | null = null;
    let ruleCreated = false;
    if (selector.status === "") {
      const ruleId = ruleIdFor(selector);
      const added = await this.deps.fleet.execute(FLEET, NO_LABELS, {
        type: "AddHoldRule",
        ruleId,
        selector,
        actor,
        reason,
      });
      ruleCreated = added.events.length > 0;
      const inForce = added.state.rules.get(ruleId);
      rule = inForce === undefined ? null : ruleView(inForce);
    }
    const runs = await this.eachMatching(selector, await this.currentRuns(selector), (runId, state) =>
      this.executeOn(runId, state, { type: "HoldRun", actor, reason, selector }),
    );
    return { runs, rule, ruleCreated };
  }

  /**
   * By id: a new window for the run, held or not, with the limits given. By selector:
   * the standing rules with exactly this selector are lifted, and every run it matches
   * that is held or stopped (as the log says now) is resumed.
   */
  async resume(request: ActionRequest, actor: Actor): Promise<ResumeResult> {
    const { target, reason, limits, compact } = request;
    if ("runId" in target) {
      const known = await this.deps.runs.latest(checkRunId(target.runId));
      if (known.lastSequence === 0) throw new NotFoundError(`no run named ${JSON.stringify(target.runId)}`);
      const run = await this.execute(target.runId, {
        ...resumeCommand(actor, reason, limits, undefined, false),
        ...(compact === undefined ? {} : { compact }),
      });
      return { runs: [run], liftedRules: [] };
    }
    if (compact !== undefined) {
      throw new InvalidArgumentError(
        "compact resumes one run by id: its conversation is compacted, not a selector's",
      );
    }
    const selector = target.selector;
    const before = await this.deps.fleet.current(FLEET);
    const lifting = [...before.rules.values()].filter((rule) => sameSelector(rule.selector, selector));
    const lifted = await this.deps.fleet.execute(FLEET, NO_LABELS, {
      type: "LiftHoldRules",
      selector,
      actor,
      reason,
    });
    const liftedIds = new Set(
      lifted.events.flatMap((e) => (e.payload.$case === "holdRuleLifted" ? [e.payload.value.ruleId] : [])),
    );
    const runs = await this.eachMatchingRead(selector, await this.deps.log.heldOrStopped(), (runId, state) =>
      this.executeOn(runId, state, resumeCommand(actor, reason, limits, selector, true)),
    );
    return {
      runs,
      liftedRules: lifting.filter((rule) => liftedIds.has(rule.ruleId)).map(ruleView),
    };
  }

  /** By id, or every run a selector matches now (a run that has not called yet is stopped at its first). */
  async stop(request: ActionRequest, actor: Actor): Promise<StopResult> {
    const { target, reason } = request;
    if ("runId" in target) {
      return { runs: [await this.execute(target.runId, { type: "StopRun", actor, reason })] };
    }
    const selector = target.selector;
    const runs = await this.eachMatching(selector, await this.currentRuns(selector), (runId, state) =>
      this.executeOn(runId, state, { type: "StopRun", actor, reason, selector }),
    );
    return { runs };
  }

  /** Lets the run's held answers through (all, or the one named): each is delivered unchanged. */
  async approve(request: GateRequest, actor: Actor): Promise<GateResult> {
    return this.decideGates(request, {
      type: "ApproveAnswer",
      actor,
      reason: request.reason,
      gateId: request.gateId,
    });
  }

  /**
   * Refuses the run's held answers (all, or the one named): each agent gets an error in its
   * API's shape; the run goes on, or stays stopped when the gate stopped it (on_match: stop).
   */
  async deny(request: GateRequest, actor: Actor): Promise<GateResult> {
    return this.decideGates(request, {
      type: "DenyAnswer",
      actor,
      reason: request.reason,
      gateId: request.gateId,
    });
  }

  private async decideGates(request: GateRequest, command: RunCommand): Promise<GateResult> {
    const runId = checkRunId(request.runId);
    const state = await this.deps.runs.latest(runId);
    if (state.lastSequence === 0) throw new NotFoundError(`no run named ${JSON.stringify(runId)}`);
    const done = await this.deps.runs.execute(runId, { tag: state.tag, tenant: state.tenant }, command);
    const gates: DecidedGate[] = [];
    for (const event of done.events) {
      const payload = event.payload;
      if (payload.$case !== "toolCallApproved" && payload.$case !== "toolCallDenied") continue;
      const gate = state.gates.get(payload.value.gateId);
      gates.push({
        gateId: payload.value.gateId,
        stepId: payload.value.stepId,
        step: payload.value.step,
        kind: gate?.kind ?? "",
        tool: gate?.tool ?? "",
        rule: gate?.rule ?? "",
        decision: payload.$case === "toolCallApproved" ? "approved" : "denied",
      });
    }
    // Decided already (by someone else, or a retry): say how, and change nothing.
    const earlier = request.gateId === undefined ? undefined : done.state.gateDecisions.get(request.gateId);
    if (done.events.length === 0 && earlier !== undefined) {
      gates.push({
        gateId: earlier.gateId,
        stepId: "",
        step: 0,
        kind: "",
        tool: "",
        rule: "",
        decision: earlier.approved ? "approved" : earlier.abandoned ? "abandoned" : "denied",
      });
    }
    return {
      run: { runId, changed: done.events.length > 0, status: done.state.status },
      gates,
    };
  }

  /** Each provider key's window, from the last reading any gateway recorded, refilled to `nowMs`. */
  async listWindows(nowMs: number): Promise<KeyWindowView[]> {
    const views: KeyWindowView[] = [];
    for (const { observedAtMs, reading } of await this.deps.log.keyReadings()) {
      const shapes = shapesOfRecorded(reading);
      const dimensions: KeyWindowView["dimensions"] = [];
      for (const [dimension, read] of [
        ["requests", reading.requests],
        ["tokens", reading.tokens],
        ["input_tokens", reading.inputTokens],
        ["output_tokens", reading.outputTokens],
      ] as const) {
        if (read?.reported !== true) continue;
        const shape = shapes[camel(dimension)] ?? "unknown";
        const state = WindowState.from(
          {
            limit: read.limit > 0 ? read.limit : undefined,
            remaining: read.remaining,
            resetAtMs: read.resetAtMs > 0 ? read.resetAtMs : undefined,
          },
          observedAtMs,
          shape,
        );
        dimensions.push({
          dimension,
          limit: read.limit,
          remainingRead: read.remaining,
          remainingNow: Math.floor(state.available(nowMs)),
          resetAtMs: read.resetAtMs,
          shape,
          shapeReadings: read.shapeReadings,
        });
      }
      const cooldown = reading.retryAfterMs > 0 ? observedAtMs + reading.retryAfterMs : 0;
      views.push({
        keyId: reading.keyId,
        upstream: reading.upstream,
        gateway: reading.gateway,
        observedAtMs,
        cooldownUntilMs: cooldown > nowMs ? cooldown : 0,
        dimensions,
      });
    }
    return views.sort((a, b) => a.upstream.localeCompare(b.upstream) || a.keyId.localeCompare(b.keyId));
  }

  async listRules(): Promise<RuleView[]> {
    const fleet = await this.deps.fleet.current(FLEET);
    return [...fleet.rules.values()].sort((a, b) => a.addedMs - b.addedMs).map(ruleView);
  }

  async liftRule(ruleId: string, reason: string, actor: Actor): Promise<RuleView> {
    if (ruleId === "") throw new InvalidArgumentError("give the id of the rule to lift");
    const rule = (await this.deps.fleet.current(FLEET)).rules.get(ruleId);
    if (rule === undefined) throw new NotFoundError(`no standing rule ${JSON.stringify(ruleId)} is in force`);
    await this.deps.fleet.execute(FLEET, NO_LABELS, { type: "LiftHoldRules", ruleId, actor, reason });
    return ruleView(rule);
  }

  private async execute(runId: string, command: RunCommand): Promise<AffectedRun> {
    checkRunId(runId);
    return this.executeOn(runId, await this.deps.runs.latest(runId), command);
  }

  /** Decides `command` on the run as just read (`state`); the append's sequence check has the last word. */
  private async executeOn(runId: string, state: RunState, command: RunCommand): Promise<AffectedRun> {
    const done = await this.deps.runs.execute(runId, { tag: state.tag, tenant: state.tenant }, command);
    return { runId, changed: done.events.length > 0, status: done.state.status };
  }

  /**
   * Candidates for a hold or stop by selector: the projection's runs (or, without a
   * projector, every run the log has), with the runs the log says are held or stopped. A
   * run newer than the projection's linger can be missed; a hold's standing rule covers it.
   */
  private async currentRuns(selector: Selector): Promise<string[]> {
    const held = await this.deps.log.heldOrStopped();
    let listed: string[];
    if (this.deps.projection === undefined) {
      listed = await this.deps.log.started();
    } else {
      const rows = await this.deps.projection.runs({ limit: MAX_LIST });
      // Only what never changes is judged from the projection; the rest from the log.
      listed = rows
        .filter((row) =>
          matches({ ...selector, modelPrefix: "", promptHash: "", status: "" }, attributes(row)),
        )
        .map((row) => row.run_id);
    }
    return [...new Set([...listed, ...held])];
  }

  /**
   * Applies `act` to every candidate the selector matches as the log has the run now
   * (its tag, latest model, prompt hash and status), a few at a time, in candidate order.
   */
  private async eachMatching(
    selector: Selector,
    candidates: readonly string[],
    act: (runId: string, state: RunState) => Promise<AffectedRun>,
    adopted: ReadonlySet<string> = NONE,
  ): Promise<AffectedRun[]> {
    const results: (AffectedRun | undefined)[] = new Array(candidates.length);
    let next = 0;
    const worker = async () => {
      while (next < candidates.length) {
        const index = next++;
        const runId = candidates[index]!;
        const state = adopted.has(runId)
          ? await this.deps.runs.current(runId)
          : await this.deps.runs.latest(runId);
        if (state.lastSequence === 0 || !matches(selector, runAttributes(state))) continue;
        results[index] = await act(checkRunId(runId), state);
      }
    };
    const workers = Math.max(1, Math.min(this.deps.concurrency ?? CONCURRENCY, candidates.length));
    await Promise.all(Array.from({ length: workers }, worker));
    return results.filter((r): r is AffectedRun => r !== undefined);
  }

  /**
   * As eachMatching, for a selector that may match thousands of runs (a resume of the
   * fleet): the candidates are read READ_CHUNK at a time in one batched read each
   * (LogRuns.histories), CHUNKS_AT_ONCE chunks at once, instead of one read per run. A
   * run the batched read cannot vouch for (or all of a chunk whose read failed) is read
   * alone, as eachMatching does.
   */
  private async eachMatchingRead(
    selector: Selector,
    candidates: readonly string[],
    act: (runId: string, state: RunState) => Promise<AffectedRun>,
  ): Promise<AffectedRun[]> {
    const chunks: string[][] = [];
    for (let i = 0; i < candidates.length; i += READ_CHUNK) chunks.push(candidates.slice(i, i + READ_CHUNK));
    const done: AffectedRun[][] = new Array(chunks.length);
    let next = 0;
    // A few chunks at a time: one's read overlaps another's appends, and the appends of
    // one chunk's last runs do not leave the log idle while the next chunk is read.
    const worker = async () => {
      while (next < chunks.length) {
        const index = next++;
        const chunk = chunks[index]!;
        const histories = await this.deps.log
          .histories(chunk.filter((runId) => runIdDefect(runId) === undefined))
          .catch(() => undefined);
        const adopted = new Set<string>();
        for (const [runId, history] of histories ?? []) {
          if (this.deps.runs.adopt(runId, history.events, history.lastStreamSequence)) adopted.add(runId);
        }
        done[index] = await this.eachMatching(selector, chunk, act, adopted);
      }
    };
    await Promise.all(Array.from({ length: Math.min(CHUNKS_AT_ONCE, chunks.length) }, worker));
    return done.flat();
  }
}

const NONE: ReadonlySet<string> = new Set();
/** Runs acted on at once by a selector (each an append in flight, or a read). */
const CONCURRENCY = 128;
/** Runs read in one batched read by a selector that may match thousands (a resume). */
const READ_CHUNK = 500;
/** Chunks of READ_CHUNK runs read and acted on at once. */
const CHUNKS_AT_ONCE = 4;

function resumeCommand(
  actor: Actor,
  reason: string,
  limits: WindowLimits | undefined,
  selector: Selector | undefined,
  onlyIfHeld: boolean,
): Extract<RunCommand, { type: "ResumeRun" }> {
  return { type: "ResumeRun", actor, reason, limits, selector, onlyIfHeld };
}

/** What a selector sees of a run as the log has it; a run that has not called yet is idle. */
function runAttributes(state: RunState) {
  return {
    runId: state.runId,
    tag: state.tag,
    model: state.model,
    promptHash: state.promptHash,
    status: state.status === RunStatus.New ? RunStatus.Idle : state.status,
  };
}

function attributes(row: ProjectedRun) {
  return { runId: row.run_id, tag: row.tag, model: row.model, promptHash: "", status: row.status };
}

function ruleView(rule: HoldRule): RuleView {
  const actor = rule.actor;
  return {
    ruleId: rule.ruleId,
    selector: rule.selector,
    description: describeSelector(rule.selector),
    actor:
      actor === undefined
        ? ""
        : actor.name === ""
          ? actorName(actor.kind)
          : `${actorName(actor.kind)} (${actor.name})`,
    reason: rule.reason,
    addedMs: rule.addedMs,
  };
}

/** A dimension as the control API names it, as `libs/predict` does. */
function camel(dimension: "requests" | "tokens" | "input_tokens" | "output_tokens") {
  return dimension === "input_tokens"
    ? "inputTokens"
    : dimension === "output_tokens"
      ? "outputTokens"
      : dimension;
}
