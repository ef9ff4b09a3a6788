import type { RunCommand, RunState } from "@holdfast/events";
import { type GatedAnswer, type Hold, heldTool, type ToolGate } from "@holdfast/gate";
import type { Ledger } from "@holdfast/runs";
import {
  GateUnavailableError,
  type GatewayError,
  ShuttingDownError,
  ToolCallDeniedError,
} from "../errors.js";
import { type Answer, type Call, CONTINUE, type GatewayFeature, type Verdict } from "../pipeline/hooks.js";
import type { Waiting } from "../pipeline/wait.js";

export interface GateFeatureOptions {
  gate: ToolGate;
  ledger: Ledger<RunState, RunCommand>;
  newId: () => string;
  /** This gateway process, as the gate's events name it. */
  gateway: string;
}

/**
 * The tool-call gate at the pipeline's hook before delivery: the gate (libs/gate)
 * judges each answer from local state (no round trip); an answer it holds is recorded on
 * the run (its outcome is already on its way to the log, and the gate's event queues
 * behind it), then waits, with the keepalives a held call gets, until an operator approves
 * it (delivered unchanged) or denies it (the agent gets an error in its API's shape), from
 * any control service: the decision is an event this gateway sees in the run's state.
 */
export function gateFeature(options: GateFeatureOptions): GatewayFeature {
  const { gate, ledger } = options;
  // The pipeline's waiting (with keepalives, cut short by the call's cancellation), once registered.
  let waiting: Waiting;

  const hook = (call: Call, answer: Answer): Verdict | Promise<Verdict> => {
    // An operator's call from a recorded step is delivered as answered: it is evidence, not an action.
    if (call.origin !== undefined) return CONTINUE;
    if (answer.summary.toolCalls.length === 0 && gate.maxRepeats === 0) return CONTINUE;
    const state = ledger.cached(call.run.runId);
    const judged: GatedAnswer = {
      runId: call.run.runId,
      tag: state?.tag || call.run.tag,
      stepId: call.stepId,
      toolCalls: answer.summary.toolCalls,
      signature: answer.toolCallsSignature,
    };
    const hold = gate.judge(judged, state);
    return hold === undefined ? CONTINUE : held(call, judged, hold);
  };

  /** Records the hold, then waits for the operator's word (or the client, or shutdown). */
  const held = async (call: Call, answer: GatedAnswer, hold: Hold): Promise<Verdict> => {
    const runId = call.run.runId;
    const gateId = options.newId();
    const command = gate.command(answer, hold, {
      gateId,
      step: call.step,
      api: call.api,
      model: call.view.model,
      stream: call.view.stream,
      promptHash: call.run.promptHash,
      requestBody: call.upstreamBody,
      secrets: call.secrets,
      gateway: options.gateway,
    });
    // The client is kept waiting from here: recording the hold may itself wait for the log.
    const keepalive = waiting.keepalive(call);
    const labels = { tag: call.run.tag, tenant: call.run.tenant };
    let after: RunState;
    try {
      after = (await ledger.execute(runId, labels, command)).state;
    } catch (error) {
      keepalive();
      call.request.log.error({ err: error, runId }, "could not record a held answer");
      return refuse(
        new GateUnavailableError(
          "Holdfast must hold this answer for an operator's approval but could not record it, so it was not delivered. Retry shortly.",
          { cause: error },
        ),
      );
    }
    call.request.log.info({ runId, gateId, kind: hold.kind }, "answer held by the tool-call gate");
    try {
      const decision = await decided(call, gateId, after);
      if (decision === "client_gone" || decision === "shutdown" || decision === "gave_up") {
        // Nobody is left to take the answer: it is dropped, and the run goes on as after a
        // decision (the agent's retry, if any, is judged anew).
        ledger
          .executeDurably(runId, labels, {
            type: "AbandonAnswer",
            gateId,
            why: decision === "client_gone" ? "client_gone" : "gateway_shutdown",
            gateway: options.gateway,
          })
          .catch((error: unknown) =>
            call.request.log.error({ err: error, runId }, "could not record a held answer abandoned"),
          );
        return refuse(new ShuttingDownError());
      }
      if (decision.kind === "approved") return CONTINUE;
      const tool = heldTool(hold, answer.toolCalls);
      const why = decision.reason === "" ? "" : `: ${decision.reason}`;
      return refuse(
        new ToolCallDeniedError(
          `Holdfast did not deliver this answer: the model's call to ${JSON.stringify(tool)} was denied${why}.`,
        ),
      );
    } finally {
      keepalive();
    }
  };

  /** Resolves with the operator's word on the held answer, or when nobody waits for it any more. */
  const decided = (
    call: Call,
    gateId: string,
    after: RunState,
  ): Promise<
    { kind: "approved" } | { kind: "denied"; reason: string } | "client_gone" | "shutdown" | "gave_up"
  > =>
    waiting.untilRun(call, after, (state) => {
      if (state.gates.has(gateId)) return undefined;
      const decision = state.gateDecisions.get(gateId);
      // Not pending and no decision on record: refused, never delivered unseen.
      if (decision?.approved === true) return { kind: "approved" as const };
      if (decision?.abandoned === true) return "client_gone" as const;
      return { kind: "denied" as const, reason: decision?.reason ?? "" };
    });

  return async (app) => {
    waiting = app.pipeline.waiting;
    app.pipeline.beforeDeliver.push(hook);
  };
}

const refuse = (error: GatewayError): Verdict => ({ kind: "refuse", error });
