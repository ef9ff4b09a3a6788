import { GATE_REGEX_FLAGS } from "@holdfast/config";
import { boundText, EVENT_BOUNDS, type GatedToolCall } from "@holdfast/events";
import { scrubSecrets, type ToolCall } from "@holdfast/providers";
import { canonicalJson } from "./rules.js";

// Arguments are recorded up to this many characters: events stay small (large content
// belongs to the snapshot store), and an operator still sees what the model asked for.
export const MAX_RECORDED_ARGUMENTS = 4_096;
const REDACTED = "[redacted]";

/**
 * Tool calls as they are recorded in gate events: arguments as the model sent them (or,
 * when they spell characters as \u escapes, as JSON writes them back), scrubbed of credentials (the request's own and
 * anything shaped like one) and of every match of `redact.patterns`, then cut to a
 * bounded length; ids and names are cut to EVENT_BOUNDS.toolNameChars.
 */
export class ArgumentRedactor {
  private readonly patterns: readonly RegExp[];

  constructor(patterns: readonly string[]) {
    this.patterns = patterns.map((pattern) => new RegExp(pattern, `g${GATE_REGEX_FLAGS}`));
  }

  redact(call: ToolCall, secrets: readonly string[]): GatedToolCall {
    // As the model sent them, unless an escape ("\u002d") could hide a value from a
    // pattern: then as JSON writes them back.
    const source = call.arguments.includes("\\u") ? canonicalJson(call.arguments) : call.arguments;
    let text = scrubSecrets(source, secrets);
    for (const pattern of this.patterns) text = text.replace(pattern, REDACTED);
    const truncated = text.length > MAX_RECORDED_ARGUMENTS;
    return {
      id: boundText(call.id, EVENT_BOUNDS.toolNameChars),
      name: boundText(scrubSecrets(call.name, secrets), EVENT_BOUNDS.toolNameChars),
      arguments: truncated ? text.slice(0, MAX_RECORDED_ARGUMENTS) : text,
      argumentsTruncated: truncated,
    };
  }
}
