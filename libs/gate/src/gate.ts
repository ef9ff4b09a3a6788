import type { Config } from "@holdfast/config";
import { type Api, EVENT_BOUNDS, type GateAnswer, type RunState, type ToolRepeat } from "@holdfast/events";
import type { ToolCall } from "@holdfast/providers";
import { ArgumentRedactor } from "./redact.js";
import { type GateMatch, ToolGateRules } from "./rules.js";
import { contentHash } from "./signature.js";

/** Why an answer is held: a rule matched one of its tool calls, or the run is looping. */
export type Hold =
  | { readonly kind: "gate"; readonly match: GateMatch }
  | { readonly kind: "loop"; readonly repeats: number; readonly signature: string };

/** An answer as the gate judges it. */
export interface GatedAnswer {
  readonly runId: string;
  /** The run's tag (its rules are the fleet's plus the tag's). */
  readonly tag: string;
  readonly stepId: string;
  readonly toolCalls: readonly ToolCall[];
  /** toolCallsSignature(toolCalls), as the step's outcome records it. */
  readonly signature: string;
}

/** What a held answer's event records besides the gate's judgement. */
export interface HeldCall {
  readonly gateId: string;
  readonly step: number;
  readonly api: Api;
  readonly model: string;
  readonly stream: boolean;
  readonly promptHash: string;
  /** The request body as forwarded (named in the event by its hash). */
  readonly requestBody: Buffer;
  /** The call's credentials, scrubbed from the arguments recorded. */
  readonly secrets: readonly string[];
  /** The gateway process holding the answer. */
  readonly gateway: string;
}

// Runs whose latest answers this process counted itself, for loop detection between an
// answer and the moment its outcome is back from the log. Oldest forgotten first.
const LOCAL_REPEATS_KEPT = 10_000;

/**
 * The tool-call gate's decisions: whether an answer is held (a rule, or a loop), and the
 * command that records the hold on the run. Local and synchronous: an answer that asks for
 * no tool costs a length check, one whose tool calls no rule names a few string
 * comparisons and the loop count, never a round trip. Approving and denying are the run's
 * own commands (ApproveAnswer, DenyAnswer), decided under its sequence check wherever they
 * are issued.
 */
export class ToolGate {
  readonly rules: ToolGateRules;
  readonly maxRepeats: number;
  private readonly redactor: ArgumentRedactor;
  private readonly counted = new Map<string, ToolRepeat>();

  constructor(config: Pick<Config, "tool_gate" | "tool_gate_by_tag" | "max_repeated_tool_calls" | "redact">) {
    this.rules = new ToolGateRules(config);
    this.maxRepeats = config.max_repeated_tool_calls;
    this.redactor = new ArgumentRedactor(config.redact.patterns);
  }

  /** Nothing is configured: no answer can be held. */
  get off(): boolean {
    return this.rules.empty && this.maxRepeats === 0;
  }

  /**
   * Whether this answer is held, judged on the run as this process follows it (`state`,
   * undefined when not cached). A rule that matches wins over a loop.
   */
  judge(answer: GatedAnswer, state: RunState | undefined): Hold | undefined {
    const { runId, toolCalls } = answer;
    if (toolCalls.length === 0) {
      if (this.counted.size > 0) this.counted.delete(runId);
      return undefined;
    }
    const match = this.rules.match(answer.tag, toolCalls);
    if (this.maxRepeats === 0) return match === undefined ? undefined : { kind: "gate", match };
    const repeats = repeatsWith(state, this.counted.get(runId), answer.stepId, answer.signature);
    this.remember(runId, { signature: answer.signature, count: repeats, stepId: answer.stepId });
    if (match !== undefined) return { kind: "gate", match };
    return repeats >= this.maxRepeats ? { kind: "loop", repeats, signature: answer.signature } : undefined;
  }

  /** The command that records a held answer on its run. */
  command(answer: GatedAnswer, hold: Hold, call: HeldCall): GateAnswer {
    // An answer may ask for any number of calls: the event records the first few, the
    // matched one always among them, and how many more there were.
    const matched = hold.kind === "gate" ? hold.match.toolCall : undefined;
    const chosen = recordedCalls(answer.toolCalls, matched);
    const recorded = chosen.map((toolCall) => this.redactor.redact(toolCall, call.secrets));
    return {
      type: "GateAnswer",
      gateId: call.gateId,
      stepId: answer.stepId,
      step: call.step,
      api: call.api,
      model: call.model,
      stream: call.stream,
      toolCalls: recorded,
      toolCallsOmitted: answer.toolCalls.length - chosen.length,
      match:
        hold.kind === "gate"
          ? {
              kind: "gate",
              toolCall: recorded[chosen.indexOf(hold.match.toolCall)] ?? recorded[0]!,
              rule: hold.match.rule,
              ruleText: hold.match.ruleText,
            }
          : { kind: "loop", repeats: hold.repeats, maxRepeats: this.maxRepeats, signature: hold.signature },
      action: hold.kind === "gate" ? hold.match.onMatch : "hold",
      requestHash: contentHash(call.requestBody),
      answerHash: contentHash(JSON.stringify(answer.toolCalls)),
      promptHash: call.promptHash,
      gateway: call.gateway,
    };
  }

  private remember(runId: string, repeat: ToolRepeat): void {
    this.counted.delete(runId);
    this.counted.set(runId, repeat);
    if (this.counted.size > LOCAL_REPEATS_KEPT) this.counted.delete(this.counted.keys().next().value!);
  }
}

/** The tool calls a gate's event records: the first EVENT_BOUNDS.toolCallsGated, `matched` always among them. */
function recordedCalls(toolCalls: readonly ToolCall[], matched: ToolCall | undefined): readonly ToolCall[] {
  const max = EVENT_BOUNDS.toolCallsGated;
  if (toolCalls.length <= max) return toolCalls;
  const first = toolCalls.slice(0, max);
  return matched === undefined || first.includes(matched) ? first : [...first.slice(0, max - 1), matched];
}

/** The tool a held answer is about: the one the rule matched, or (a loop) the first. */
export function heldTool(hold: Hold, toolCalls: readonly ToolCall[]): string {
  return hold.kind === "gate" ? hold.match.toolCall.name : (toolCalls[0]?.name ?? "");
}

/**
 * How many answers in a row, this one included, asked for exactly these tool calls: from
 * the run's count as the log has it, or from this process's own count of the run's
 * previous answer while that answer's outcome is still on its way to the log (its step
 * still open in the fold).
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
