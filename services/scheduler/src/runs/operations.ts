import { createHash } from "node:crypto";
import type { Bus, WatchedEvent } from "@holdfast/bus";
import {
  type Actor,
  assertTag,
  type DecodedEnvelope,
  DurablePhase,
  DurableRunError,
  durableRunOf,
  durableStatusOf,
  type EventType,
  foldRun,
  isKnown,
  MAX_RUN_ID_LENGTH,
  outOfSequence,
  type RunCommand,
  type RunState,
  runIdDefect,
  type StoredEnvelope,
  scopedRunId,
  durableSummaryOf as summaryOf,
  tagDefect,
  tenantDefect,
} from "@holdfast/events";
import { jsonDepthExceeds } from "@holdfast/http";
import { type AgentView, type DurableRun, DurableStatus, type SubmitRunRequest } from "@holdfast/proto";
import type { Ledger } from "@holdfast/runs";
import { type AgentRegistry, checkAgentName, type DeployRequest, MAX_CEILING_S } from "../agents/registry.js";
import {
  FailedPreconditionError,
  IdempotencyKeyReusedError,
  InvalidArgumentError,
  NotFoundError,
} from "../errors.js";
import type { Scheduler } from "../queue/scheduler.js";

export interface OperationsDeps {
  bus: Bus;
  ledger: Ledger<RunState, RunCommand>;
  scheduler: Scheduler;
  agents: AgentRegistry;
  newId: () => string;
  /** How deep a run's input may nest (http.max_json_depth), over gRPC as over REST. */
  maxJsonDepth: number;
}

/** The most input a run may be submitted with (it is in the run's first event). */
const MAX_INPUT_BYTES = 1_000_000;
const MAX_PARTITION_KEY = 256;
const MAX_IDEMPOTENCY_KEY = 256;
const DEFAULT_LIST = 100;

/**
 * The durable-run API's use cases, shared by gRPC and REST: each checks its request,
 * decides on the run as the log has it, and answers with the run as it then stands.
 */
export class RunsOperations {
  /** Durable runs by submission (id → agent, when), newest last: what List pages through. */
  private readonly index = new Map<string, { agent: string; submittedMs: number }>();

  constructor(private readonly deps: OperationsDeps) {}

  /** Remembers a durable run for List (at start, every run the log holds; then each submitted). */
  indexed(runId: string, agent: string, submittedMs: number): void {
    this.index.set(runId, { agent, submittedMs });
  }

  async submit(request: SubmitRunRequest, actor: Actor): Promise<{ run: DurableRun; created: boolean }> {
    const agent = checkAgentName(request.agent);
    const deployment = this.deps.agents.get(agent);
    if (deployment === undefined) {
      throw new NotFoundError(
        `agent ${JSON.stringify(agent)} is not deployed: register it first (holdfast deploy <module>)`,
      );
    }
    const inputJson = request.inputJson.trim() === "" ? "null" : request.inputJson;
    if (Buffer.byteLength(inputJson) > MAX_INPUT_BYTES) {
      throw new InvalidArgumentError(`input_json is larger than ${MAX_INPUT_BYTES} bytes`);
    }
    let input: unknown;
    try {
      input = JSON.parse(inputJson);
    } catch (error) {
      throw new InvalidArgumentError(`input_json is not JSON: ${(error as Error).message}`);
    }
    if (jsonDepthExceeds(input, this.deps.maxJsonDepth)) {
      throw new InvalidArgumentError(
        `input_json nests objects and arrays more than ${this.deps.maxJsonDepth} levels deep (http.max_json_depth)`,
      );
    }
    if (request.partitionKey.length > MAX_PARTITION_KEY) {
      throw new InvalidArgumentError(`partition_key is longer than ${MAX_PARTITION_KEY} characters`);
    }
    if (request.idempotencyKey.length > MAX_IDEMPOTENCY_KEY) {
      throw new InvalidArgumentError(`idempotency_key is longer than ${MAX_IDEMPOTENCY_KEY} characters`);
    }
    const timeout = request.timeoutSeconds;
    if (timeout !== 0 && (!Number.isInteger(timeout) || timeout < 1 || timeout > MAX_CEILING_S)) {
      throw new InvalidArgumentError(
        `timeout_seconds must be between 1 and ${MAX_CEILING_S} (24 h), or 0 for the agent's`,
      );
    }
    for (const [name, value, defectOf] of [
      ["tenant", request.tenant, tenantDefect],
      ["tag", request.tag, tagDefect],
    ] as const) {
      const defect = value === "" ? undefined : defectOf(value);
      if (defect !== undefined) throw new InvalidArgumentError(`${name} ${defect}`);
    }
    if (request.tag !== "") assertTag(request.tag);
    // A tenant's run is `<tenant>/<agent>-…`, as the gateway scopes its model calls' run.
    const runId = scopedRunId(
      request.tenant,
      request.idempotencyKey === ""
        ? `${agent}-${this.deps.newId()}`
        : `${agent}-${createHash("sha256")
            .update(`${request.tenant}\u0000${agent}\u0000${request.idempotencyKey}`)
            .digest("hex")
            .slice(0, 32)}`,
    );
    if (runId.length > MAX_RUN_ID_LENGTH || runIdDefect(runId) !== undefined) {
      throw new InvalidArgumentError(
        request.tenant === ""
          ? `agent name ${JSON.stringify(agent)} is too long to name a run`
          : `agent name ${JSON.stringify(agent)} with tenant ${JSON.stringify(request.tenant)} is too long to name a run (the tenant's prefix counts)`,
      );
    }
    const caps = {
      ...deployment.caps,
      ceilingMs: timeout === 0 ? deployment.caps.ceilingMs : timeout * 1_000,
    };
    const done = await this.deps.ledger
      .execute(
        runId,
        { tag: request.tag, tenant: request.tenant },
        {
          type: "SubmitRun",
          agent,
          version: deployment.version,
          inputJson,
          partitionKey: request.partitionKey,
          idempotencyKey: request.idempotencyKey,
          caps,
          actor,
        },
      )
      .catch((error: unknown) => {
        if (!(error instanceof DurableRunError) || error.reason !== "idempotency_key_reused") throw error;
        throw new IdempotencyKeyReusedError(
          `${error.message} (run ${runId}): a new run needs a new key; the same input with it answers that run`,
          { cause: error },
        );
      });
    const durable = done.state.durable;
    if (durable === null) throw new FailedPreconditionError(`run ${runId} exists and is not a durable run`);
    const created = done.events.length > 0;
    if (created) this.indexed(runId, agent, durable.submittedMs);
    // Queued whether or not this call made it: an earlier submission whose append landed
    // while it reported a failure is retried with its idempotency key, and must run.
    if (!created) await this.deps.scheduler.found(runId);
    else this.deps.scheduler.enqueue(runId, done.state);
    return { run: summaryOf(runId, done.state, durable), created };
  }

  async get(runId: string): Promise<DurableRun> {
    const history = await this.deps.bus.readRun(checkRunId(runId));
    const run = durableRunOf(
      runId,
      history.events.map((e) => e.envelope),
    );
    if (run === undefined) throw new NotFoundError(`no durable run ${JSON.stringify(runId)}`);
    return run;
  }

  async list(filter: { agent: string; status: DurableStatus; limit: number }): Promise<DurableRun[]> {
    const limit = filter.limit > 0 ? Math.min(filter.limit, 1_000) : DEFAULT_LIST;
    const runs: DurableRun[] = [];
    const ids = [...this.index.entries()]
      .filter(([, entry]) => filter.agent === "" || entry.agent === filter.agent)
      .sort((a, b) => b[1].submittedMs - a[1].submittedMs);
    for (const [runId] of ids) {
      if (runs.length >= limit) break;
      const state = await this.deps.ledger.current(runId);
      if (state.durable === null) continue;
      if (
        filter.status !== DurableStatus.DURABLE_STATUS_UNSPECIFIED &&
        durableStatusOf(state) !== filter.status
      )
        continue;
      runs.push(summaryOf(runId, state, state.durable));
    }
    return runs;
  }

  // An operator's action answers with the run as it now stands, without its steps (reading
  // every step of a long run would hold up the run it has just queued): Get has them.

  async cancel(runId: string, actor: Actor, reason: string): Promise<DurableRun> {
    const state = await this.durable(runId);
    const phase = state.durable!.phase;
    if (phase === DurablePhase.Finished || phase === DurablePhase.Failed) {
      throw new FailedPreconditionError(
        `the run has ${phase === DurablePhase.Finished ? "finished" : "failed"} already`,
      );
    }
    return summary(runId, await this.deps.scheduler.cancel(runId, actor, reason));
  }

  async redrive(runId: string, actor: Actor, reason: string): Promise<DurableRun> {
    await this.durable(runId);
    try {
      return summary(runId, await this.deps.scheduler.redrive(runId, actor, reason, false, ""));
    } catch (error) {
      // Queued already (an earlier re-drive landed though it reported a failure): it must run.
      await this.deps.scheduler.found(runId);
      throw error;
    }
  }

  async replay(runId: string, actor: Actor, reason: string): Promise<DurableRun> {
    const state = await this.durable(runId);
    const deployment = this.deps.agents.get(state.durable!.agent);
    if (deployment === undefined) throw new NotFoundError(`agent ${state.durable!.agent} is not deployed`);
    return summary(runId, await this.deps.scheduler.redrive(runId, actor, reason, true, deployment.version));
  }

  /**
   * The run's events from its first, then each as it is stored, to `send`, until the run
   * ends or `signal` aborts. Resolves when the watch is over.
   */
  async watch(runId: string, send: (event: DecodedEnvelope) => void, signal: AbortSignal): Promise<void> {
    checkRunId(runId);
    let lastStreamSequence = 0;
    let lastSequence = 0;
    let ended = false;
    let live = false;
    const waiting: WatchedEvent[] = [];
    let finish: () => void = () => undefined;
    const over = new Promise<void>((resolve) => {
      finish = resolve;
    });
    // Each of the run's events in its order, once: one this version does not know keeps
    // its place but is not sent.
    const deliver = (envelope: StoredEnvelope, streamSequence: number) => {
      if (streamSequence <= lastStreamSequence || envelope.sequence !== lastSequence + 1) return;
      lastStreamSequence = streamSequence;
      lastSequence = envelope.sequence;
      if (!isKnown(envelope)) return;
      send(envelope);
      // The run's history may hold an end it was re-driven past: only a live one ends the watch.
      if (!live) return;
      const $case = envelope.payload.$case;
      ended = $case === "runFinished" || $case === "runFailed";
      if (ended) finish();
    };
    // Read from the log itself: an event past the run's next is a gap in the log, not in
    // what the tail heard: quarantined, and the run's next event still delivered.
    const fromLog = (events: readonly { envelope: StoredEnvelope; streamSequence: number }[]) => {
      for (const { envelope, streamSequence } of events) {
        if (streamSequence > lastStreamSequence && envelope.sequence > lastSequence + 1) {
          const subject = this.deps.bus.subjects.runEvent(runId, envelope.type as EventType);
          this.deps.bus.quarantined(outOfSequence(envelope, { streamSequence, subject }, lastSequence));
        }
        deliver(envelope, streamSequence);
      }
    };
    const catchUp = async () => {
      fromLog((await this.deps.bus.readRun(runId, lastStreamSequence)).events);
    };
    const heard = (event: WatchedEvent) => {
      if (!live) {
        waiting.push(event);
        return;
      }
      // One the bus quarantines is no event of the run: the log's read passes over it too.
      const envelope = this.deps.bus.decode(event);
      if (envelope === undefined) return;
      // A gap (an event missed across a reconnect): read what is missing from the log.
      if (envelope.sequence > lastSequence + 1) void catchUp().catch(() => undefined);
      else deliver(envelope, event.streamSequence);
    };
    const untail = this.deps.bus.tail(runId, heard);
    const abort = () => finish();
    signal.addEventListener("abort", abort, { once: true });
    try {
      const history = await this.deps.bus.readRun(runId);
      const first = history.events[0]?.envelope;
      if (first === undefined || !history.events.some((e) => e.envelope.type === "RunSubmitted")) {
        throw new NotFoundError(`no durable run ${JSON.stringify(runId)}`);
      }
      fromLog(history.events);
      // Ended, and not re-driven since (as the run folds: a model call's outcome may come
      // after its end): nothing more will come.
      const phase = foldRun(
        runId,
        history.events.map((e) => e.envelope),
      ).durable?.phase;
      ended = phase === DurablePhase.Finished || phase === DurablePhase.Failed;
      if (ended) return;
      live = true;
      for (const event of waiting.splice(0)) heard(event);
      if (!ended) await over;
    } finally {
      signal.removeEventListener("abort", abort);
      untail();
    }
  }

  async deploy(
    request: DeployRequest,
    actor: Actor,
  ): Promise<{ agent: AgentView; changes: string[]; previousVersion: string }> {
    const { deployment, changes, previous } = await this.deps.agents.deploy(request, actor);
    return { agent: this.agentView(deployment.agent)!, changes, previousVersion: previous?.version ?? "" };
  }

  agents(): AgentView[] {
    return this.deps.agents.all().map((d) => this.agentView(d.agent)!);
  }

  private agentView(agent: string): AgentView | undefined {
    const deployment = this.deps.agents.get(agent);
    if (deployment === undefined) return undefined;
    return {
      agent,
      version: deployment.version,
      caps: deployment.caps,
      deployedMs: deployment.deployedMs,
      workers: this.deps.scheduler.workersServing(agent),
      workersOnVersion: this.deps.scheduler.workersServing(agent, deployment.version),
    };
  }

  private async durable(runId: string): Promise<RunState> {
    const state = await this.deps.ledger.latest(checkRunId(runId));
    if (state.durable === null) throw new NotFoundError(`no durable run ${JSON.stringify(runId)}`);
    return state;
  }
}

function summary(runId: string, state: RunState): DurableRun {
  if (state.durable === null) throw new NotFoundError(`no durable run ${JSON.stringify(runId)}`);
  return summaryOf(runId, state, state.durable);
}

function checkRunId(runId: string): string {
  const defect = runIdDefect(runId);
  if (defect !== undefined) throw new InvalidArgumentError(`run id ${defect}`);
  return runId;
}
