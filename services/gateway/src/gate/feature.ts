import type { GateAnswer, RunCommand, RunState, ToolRepeat } from "@holdfast/events";
import { type ArgumentRedactor, contentHash, type GateMatch, type ToolGateRules } from "@holdfast/gate";
import type { ToolCall } from "@holdfast/providers";
import type { Ledger } from "@holdfast/runs";
import {
  GateUnavailableError,
  type GatewayError,
  ShuttingDownError,
  ToolCallDeniedError,
} from "../errors.js";
import { startKeepalive } from "../hold/park.js";
import { type Answer, type Call, CONTINUE, type GatewayFeature, type Verdict } from "../pipeline/hooks.js";

export interface GateFeatureOptions {
  rules: ToolGateRules;
  /** max_repeated_tool_calls: 0 is off. */
  maxRepeats: number;
  redactor: ArgumentRedactor;
  ledger: Ledger<RunState, RunCommand>;
  newId: () => string;
  /** This gateway process, as the gate's events name it. */
  gateway: string;
  keepaliveMs: number;
  keepalive1xx: boolean;
  /** Aborted when this gateway shuts down: held answers are answered "retry". */
  shutdown: AbortSignal;
}

/** Why an answer is held: a rule matched one of its tool calls, or the run is looping. */
type Hold = { kind: "gate"; match: GateMatch } | { kind: "loop"; repeats: number; signature: string };

// Runs whose latest answers this gateway counted itself, for loop detection between an
// answer and the moment its outcome is back from the log. Oldest forgotten first.
const LOCAL_REPEATS_KEPT = 10_000;

/**
 * The tool-call gate at the pipeline's hook before delivery. An answer that asks for no
 * tool, or for none a rule names, is decided from local state only (compiled rules, the
 * run's repeat count as the gateway follows it): no round trip. An answer that matches is
 * held: its outcome is already on its way to the log (the gate's event queues behind it),
 * the gate's event records what the model asked for and the rule, and the answer waits,
 * with the keepalives a held call gets, until an operator approves it (delivered
 * unchanged) or denies it (the agent gets an error in its API's shape), from any gateway
 * or control service: the decision is an event this gateway sees in the run's state.
 */
export function gateFeature(options: GateFeatureOptions): GatewayFeature {
  const { rules, maxRepeats, ledger } = options;
  const counted = new Map<string, ToolRepeat>();

  const hook = async (call: Call, answer: Answer): Promise<Verdict> => {
    const runId = call.run.runId;
    const toolCalls = answer.summary.toolCalls;
    if (toolCalls.length === 0) {
      if (counted.size > 0) counted.delete(runId);
      return CONTINUE;
    }
    const state = ledger.cached(runId);
    const match = rules.match(state?.tag || call.run.tag, toolCalls);
    let hold: Hold | undefined = match === undefined ? undefined : { kind: "gate", match };
    if (maxRepeats > 0) {
      const repeats = repeatsWith(state, counted.get(runId), call.stepId, answer.toolCallsSignature);
      remember(counted, runId, { signature: answer.toolCallsSignature, count: repeats, stepId: call.stepId });
      if (hold === undefined && repeats >= maxRepeats) {
        hold = { kind: "loop", repeats, signature: answer.toolCallsSignature };
      }
    }
    if (hold === undefined) return CONTINUE;
    return held(call, toolCalls, hold);
  };

  /** Records the hold, then waits for the operator's word (or the client, or shutdown). */
  const held = async (call: Call, toolCalls: readonly ToolCall[], hold: Hold): Promise<Verdict> => {
    const runId = call.run.runId;
    const recorded = toolCalls.map((toolCall) => options.redactor.redact(toolCall, call.secrets));
    const gateId = options.newId();
    const command: GateAnswer = {
      type: "GateAnswer",
      gateId,
      stepId: call.stepId,
      step: call.step,
      api: call.api,
      model: call.view.model,
      stream: call.view.stream,
      toolCalls: recorded,
      match:
        hold.kind === "gate"
          ? {
              kind: "gate",
              toolCall: recorded[toolCalls.indexOf(hold.match.toolCall)] ?? recorded[0]!,
              rule: hold.match.rule,
              ruleText: hold.match.ruleText,
            }
          : { kind: "loop", repeats: hold.repeats, maxRepeats, signature: hold.signature },
      action: hold.kind === "gate" ? hold.match.onMatch : "hold",
      requestHash: contentHash(call.upstreamBody),
      answerHash: contentHash(JSON.stringify(toolCalls)),
      promptHash: call.run.promptHash,
      gateway: options.gateway,
    };
    // The client is kept waiting from here: recording the hold may itself wait for the log.
    const keepalive = startKeepalive(call, options);
    let after: RunState;
    try {
      after = (await ledger.execute(runId, { tag: call.run.tag, tenant: call.run.tenant }, command)).state;
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
      switch (decision.kind) {
        case "approved":
          return CONTINUE;
        case "denied": {
          const tool = hold.kind === "gate" ? hold.match.toolCall.name : (toolCalls[0]?.name ?? "");
          const why = decision.reason === "" ? "" : `: ${decision.reason}`;
          return refuse(
            new ToolCallDeniedError(
              `Holdfast did not deliver this answer: an operator denied the model's call to ${JSON.stringify(tool)}${why}.`,
            ),
          );
        }
        case "client_gone":
        // Nobody is left to answer: the refusal goes nowhere, and the answer is not delivered.
        case "shutdown":
          return refuse(new ShuttingDownError());
      }
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
    { kind: "approved" } | { kind: "denied"; reason: string } | { kind: "client_gone" } | { kind: "shutdown" }
  > =>
    new Promise((resolve) => {
      let done = false;
      const settle = (outcome: Parameters<typeof resolve>[0]) => {
        if (done) return;
        done = true;
        unsubscribe();
        call.clientGone.removeEventListener("abort", gone);
        options.shutdown.removeEventListener("abort", closing);
        resolve(outcome);
      };
      const check = (state: RunState) => {
        if (state.gates.has(gateId)) return;
        const decision = state.gateDecisions.get(gateId);
        // Not pending and no decision on record: refused, never delivered unseen.
        if (decision?.approved === true) settle({ kind: "approved" });
        else settle({ kind: "denied", reason: decision?.reason ?? "" });
      };
      const gone = () => settle({ kind: "client_gone" });
      const closing = () => settle({ kind: "shutdown" });
      const unsubscribe = ledger.subscribe(call.run.runId, check);
      call.clientGone.addEventListener("abort", gone, { once: true });
      options.shutdown.addEventListener("abort", closing, { once: true });
      if (call.clientGone.aborted) return gone();
      if (options.shutdown.aborted) return closing();
      // The decision may have come between the append and the subscription.
      check(ledger.cached(call.run.runId) ?? after);
    });

  return async (app) => {
    app.pipeline.beforeDeliver.push(hook);
  };
}

const refuse = (error: GatewayError): Verdict => ({ kind: "refuse", error });

/**
 * How many answers in a row, this one included, asked for exactly these tool calls: from
 * the run's count as the log has it, or from this gateway's own count of the run's
 * previous answer while that answer's outcome is still on its way to the log.
 */
function repeatsWith(
  state: RunState | undefined,
  local: ToolRepeat | undefined,
  stepId: string,
  signature: string,
): number {
  // This answer's own outcome is folded in already.
  if (state?.repeat.stepId === stepId) return state.repeat.count;
  const localIsNewer = local !== undefined && (state === undefined || state.open.has(local.stepId));
  const before = localIsNewer ? local : state?.repeat;
  return before !== undefined && before.signature === signature ? before.count + 1 : 1;
}

function remember(counted: Map<string, ToolRepeat>, runId: string, repeat: ToolRepeat): void {
  counted.delete(runId);
  counted.set(runId, repeat);
  if (counted.size > LOCAL_REPEATS_KEPT) counted.delete(counted.keys().next().value!);
}
