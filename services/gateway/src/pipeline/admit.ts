import {
  NO_LIMITS,
  RunBusyError,
  RunHeldError,
  type RunState,
  RunStatus,
  RunStoppedError,
  type StartStep,
  type Trip,
} from "@holdfast/events";
import { redactSecretsDeep } from "@holdfast/providers";
import type { Executed } from "@holdfast/runs";
import {
  type GatewayError,
  LogUnavailableError,
  RunStoppedGatewayError,
  ShuttingDownError,
} from "../errors.js";
import type { PipelineDeps } from "./call.js";
import { type Ending, LEFT, refused } from "./finish.js";
import type { Amendment, BeforeForward, PipelineHooks } from "./hooks.js";
import type { CallState } from "./state.js";

/**
 * What became of a step's start: the log started it, found the run held or stopped, or
 * found it busy (near its cost limit, calls in flight must finish first).
 */
export type StartResult = "started" | "held" | "stopped" | "busy";

/** A call let in: its start in flight (or already accepted, when a feature asked to confirm first). */
export interface Admitted {
  readonly started: Promise<StartResult>;
}

/** What the features said, in order, once the pipeline applied their amendments. */
type Decided =
  | { readonly kind: "go"; readonly confirm: boolean }
  | { readonly kind: "park"; readonly trip: Trip | undefined; readonly action: "hold" | "stop" | undefined }
  | { readonly kind: "end"; readonly ending: Ending };

const GO: Decided = Object.freeze({ kind: "go", confirm: false });
const GO_CONFIRMED: Decided = Object.freeze({ kind: "go", confirm: true });

/**
 * The admit stage: asks the features before forward in their declared order (routing,
 * pricing, prediction, budgets), applying each one's amendment before asking the next;
 * records a trip one of them asks for; asks the holds last (a held run's call parks here,
 * for as long as it takes, and is then decided anew: a resumed run may be held again
 * before this call starts; a stopped run's call is refused); and appends the step's start.
 * Resolves with the start in flight, or with how the call ended meanwhile.
 */
export async function admit(
  call: CallState,
  hooks: PipelineHooks,
  deps: PipelineDeps,
): Promise<Admitted | Ending> {
  for (;;) {
    // Each pass takes the budget leases anew (after a park, a held start).
    call.readmit();
    let decided = await decide(call, hooks.beforeForward, deps);
    if (decided.kind === "end") return decided.ending;
    let confirm = decided.kind === "go" && decided.confirm;
    if (decided.kind === "park" && decided.trip !== undefined) {
      // A limit or budget is spent: the run is tripped, and the holds decide what that made of it.
      await deps.ledger.execute(call.run.runId, call.labels, {
        type: "TripRun",
        trip: decided.trip,
        action: decided.action ?? deps.onTrip,
      });
      decided = GO;
    }
    if (decided.kind === "go") {
      decided = await decide(call, hooks.beforeStart, deps);
      if (decided.kind === "end") return decided.ending;
      if (decided.kind === "go" && decided.confirm) confirm = true;
    }
    if (decided.kind === "park") {
      hooks.parked(call);
      const ending = await parked(call, deps);
      if (ending !== undefined) return ending;
      continue;
    }
    // Cancelled while a feature waited (the gateway shutting down, a feature giving up), and
    // gone on all the same: nothing is started. (A client gone is started and recorded as
    // aborted, as the attempt it cancels says.)
    if (call.cancelled !== undefined && call.cancelled.kind !== "client_gone") return cancelled(call);
    if (!deps.logConnected()) return refused(logUnavailable());
    const started = startResult(
      call,
      deps.ledger.execute(call.run.runId, call.labels, startCommand(call, deps)),
    );
    // In the same round of writes as the start: no round trip of its own on the call's path.
    deps.snapshots?.started(call);
    // A near limit, a matching standing rule, or a feature's say: no forwarding on a guess.
    if (confirm) {
      const result = await started;
      if (result === "stopped") return refused(new RunStoppedGatewayError(call.run.runId));
      if (result === "held") continue;
      if (result === "busy") {
        const ending = await roomMade(call, deps);
        if (ending !== undefined) return ending;
        continue;
      }
    }
    return { started };
  }
}

/**
 * Rewrites of one call's body that ask the feature again, per decision: past them the
 * feature's rewrite is not applied and the next feature is asked. A feature that rewrites
 * for ever (a compaction that keeps matching the body it made) would otherwise hold the
 * event loop: every turn is a microtask.
 */
export const MAX_REWRITES = 4;

/**
 * Asks these features in order, applying each amendment: a reroute or a note for the start
 * goes on to the next feature; a rewrite (at most MAX_REWRITES), or a wait once waited,
 * asks the same one again; a refusal ends the call; a park stops the asking. A feature that
 * decides at once is not awaited.
 */
async function decide(
  call: CallState,
  features: readonly BeforeForward[],
  deps: PipelineDeps,
): Promise<Decided> {
  let confirm = false;
  let rewrites = 0;
  for (let i = 0; i < features.length; ) {
    const asked = features[i]!(call);
    const amendment: Amendment = asked instanceof Promise ? await asked : asked;
    switch (amendment.kind) {
      case "continue":
      case "confirm":
        if (amendment.notes !== undefined) call.note(amendment.notes);
        if (amendment.kind === "confirm") confirm = true;
        i += 1;
        break;
      case "reroute":
        call.moveTo(amendment.to);
        i += 1;
        break;
      case "rewrite":
        if (rewrites >= MAX_REWRITES) {
          i += 1;
          break;
        }
        rewrites += 1;
        call.rewrite(amendment.body, amendment.json);
        break;
      case "wait": {
        const how = await deps.waiting.pause(call, amendment.ms);
        if (how !== "ready") return { kind: "end", ending: cancelled(call) };
        break;
      }
      case "refuse":
        return { kind: "end", ending: refused(amendment.error) };
      case "park":
        return { kind: "park", trip: amendment.trip, action: amendment.action };
    }
  }
  return confirm ? GO_CONFIRMED : GO;
}

/** Parks the call while its run is held; undefined once it is released (to be decided anew). */
async function parked(call: CallState, deps: PipelineDeps): Promise<Ending | undefined> {
  const how = await deps.waiting.park(call, call.labels);
  if (how === "released") return undefined;
  if (how === "stopped") return refused(new RunStoppedGatewayError(call.run.runId));
  return cancelled(call);
}

/**
 * How a call cancelled before its start ends: nothing was started, so nothing is recorded;
 * a client gone is not answered; a shutdown is answered 503 (the client's SDK retries it on
 * another gateway, where the call parks again); a give-up with the error the feature gave.
 */
export function cancelled(call: Pick<CallState, "cancelled">): Ending {
  const reason = call.cancelled;
  if (reason === undefined || reason.kind === "client_gone") return LEFT;
  if (reason.kind === "gave_up") return refused(reason.error);
  return refused(new ShuttingDownError());
}

/**
 * Waits for the run to make room (a call in flight finished); how the call ended when it
 * is cancelled meanwhile (the client left, the gateway is shutting down).
 */
export async function roomMade(call: CallState, deps: PipelineDeps): Promise<Ending | undefined> {
  const how = await deps.waiting.waitForRoom(call);
  return how === "ready" ? undefined : cancelled(call);
}

function startCommand(call: CallState, deps: PipelineDeps): StartStep {
  return redactSecretsDeep(
    {
      type: "StartStep",
      stepId: call.stepId,
      api: call.api,
      model: call.view.model,
      stream: call.view.stream,
      identity: call.run.identity,
      messageCount: call.view.messageCount,
      upstream: call.upstream.origin,
      gateway: deps.instanceId,
      estimatedInputTokens: call.estimatedInputTokens,
      promptHash: call.run.promptHash,
      reservedNanoUsd: call.reservedNanoUsd,
      budgetLeases: [...call.budgetLeases],
      prediction: call.prediction,
      ...(call.route === undefined ? {} : { route: call.route.choice }),
      tag: call.labels.tag,
      // An operator's call from a recorded step: no limit, and no standing rule, applies.
      ...(call.origin === undefined
        ? { limits: deps.limitsFor(call.labels.tag), rules: deps.rules() }
        : { limits: NO_LIMITS, rules: [], origin: { ...call.origin } }),
    },
    call.secrets,
  );
}

/** The start's fate; the log's own failure stays a rejection (the call cannot be recorded). */
function startResult(call: CallState, execution: Promise<Executed<RunState>>): Promise<StartResult> {
  return execution.then(
    ({ events, state }) => {
      for (const event of events) {
        if (event.payload.$case !== "stepStarted") continue;
        call.step = event.payload.value.step;
        return "started";
      }
      if (state.status === RunStatus.Stopped) return "stopped";
      if (state.status === RunStatus.Held) return "held";
      // The step was already started (a retried decision): it stands.
      call.step = state.open.get(call.stepId)?.step ?? call.step;
      return "started";
    },
    (error: unknown) => {
      if (error instanceof RunHeldError) return "held";
      if (error instanceof RunStoppedError) return "stopped";
      if (error instanceof RunBusyError) return "busy";
      throw logUnavailable(error);
    },
  );
}

export function logUnavailable(cause?: unknown): GatewayError {
  return new LogUnavailableError(
    "Holdfast could not record this call in its event log, so it was not sent to the provider. Retry shortly.",
    { cause },
  );
}
