import { type Config, GATE_REGEX_FLAGS } from "@holdfast/config";
import type { ToolCall } from "@holdfast/providers";
import picomatch from "picomatch";

/** What a matched rule does to the run while its answer waits. */
export type OnMatch = "hold" | "stop";

/** A tool call a rule matched, and the rule. */
export interface GateMatch {
  readonly toolCall: ToolCall;
  /** The rule's key in the configuration: "tool_gate.deny[2]", "tool_gate_by_tag.prod.deny[0]". */
  readonly rule: string;
  /** What the rule says: `send_email, args /@(?!example\.com)/`. */
  readonly ruleText: string;
  readonly onMatch: OnMatch;
}

interface CompiledRule {
  readonly key: string;
  readonly text: string;
  readonly name: (tool: string) => boolean;
  readonly args: RegExp | undefined;
}

interface RuleSet {
  readonly rules: readonly CompiledRule[];
  readonly onMatch: OnMatch;
}

export type GateConfig = Pick<Config, "tool_gate" | "tool_gate_by_tag">;

/**
 * The tool-call gate's rules, compiled once: `tool_gate.deny`, plus a tag's own
 * `tool_gate_by_tag.<tag>.deny` for its runs (a tag's rules add to the fleet's; its
 * `on_match` replaces the fleet's). A rule matches a tool call when its glob matches the
 * tool's name and its regular expression, if any, is found in the arguments as the model
 * sent them (JSON text), or in them as JSON writes them back (so an escape such as
 * "\u0040" does not hide an "@" from it). The answer's first tool call that a rule matches
 * holds it, with the first rule that matches that call. Pure and local: an answer that asks for no gated tool costs a few
 * string comparisons, no round trip.
 */
export class ToolGateRules {
  private readonly fleet: RuleSet;
  private readonly byTag = new Map<string, RuleSet>();

  constructor(config: GateConfig) {
    this.fleet = {
      rules: config.tool_gate.deny.map((rule, index) => compile(rule, `tool_gate.deny[${index}]`)),
      onMatch: config.tool_gate.on_match,
    };
    for (const [tag, own] of Object.entries(config.tool_gate_by_tag)) {
      this.byTag.set(tag, {
        rules: [
          ...this.fleet.rules,
          ...(own.deny ?? []).map((rule, index) => compile(rule, `tool_gate_by_tag.${tag}.deny[${index}]`)),
        ],
        onMatch: own.on_match ?? this.fleet.onMatch,
      });
    }
  }

  /** Whether any run could have an answer gated (no rule anywhere: the gate costs nothing). */
  get empty(): boolean {
    if (this.fleet.rules.length > 0) return false;
    for (const set of this.byTag.values()) if (set.rules.length > 0) return false;
    return true;
  }

  /** The first tool call (in the answer's order) a rule for this tag matches, with that rule. */
  match(tag: string, toolCalls: readonly ToolCall[]): GateMatch | undefined {
    const set = this.byTag.get(tag) ?? this.fleet;
    if (set.rules.length === 0) return undefined;
    for (const toolCall of toolCalls) {
      let canonical: string | undefined;
      for (const rule of set.rules) {
        if (!rule.name(toolCall.name)) continue;
        if (rule.args !== undefined && !rule.args.test(toolCall.arguments)) {
          // JSON may spell a character as an escape ("\u0040" for "@"): the regex also
          // reads the arguments as JSON writes them back, escapes undone.
          canonical ??= canonicalJson(toolCall.arguments);
          if (canonical === toolCall.arguments || !rule.args.test(canonical)) continue;
        }
        return { toolCall, rule: rule.key, ruleText: rule.text, onMatch: set.onMatch };
      }
    }
    return undefined;
  }
}

/** JSON text as JSON.stringify writes it back (escapes of ordinary characters undone); itself if not JSON. */
export function canonicalJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text));
  } catch {
    return text;
  }
}

function compile(rule: { name: string; args?: string | undefined }, key: string): CompiledRule {
  const args = rule.args === undefined ? undefined : new RegExp(rule.args, GATE_REGEX_FLAGS);
  return {
    key,
    text: args === undefined ? rule.name : `${rule.name}, args ${args}`,
    name: picomatch(rule.name, { dot: true }),
    args,
  };
}
