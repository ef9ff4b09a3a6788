import { isRecord } from "./json.js";

/** A scripted tool call, written in a user message as `[[call:NAME {json args}]]`. */
export interface CallDirective {
  readonly name: string;
  readonly args: Readonly<Record<string, unknown>>;
}

/** The directive text that scripts a call, for a test to put in a user message. */
export function callDirective(name: string, args?: Readonly<Record<string, unknown>>): string {
  return args === undefined ? `[[call:${name}]]` : `[[call:${name} ${JSON.stringify(args)}]]`;
}

const OPENING = /\[\[call:([A-Za-z0-9_-]{1,64})\s*/.source;
const CLOSING = "]]";

/**
 * Finds every directive in `text`, in order. A directive whose arguments are not a JSON object is
 * skipped, so its text reaches the reply and the test's author sees what went wrong.
 */
export function parseDirectives(text: string): CallDirective[] {
  const directives: CallDirective[] = [];
  const opening = new RegExp(OPENING, "g");
  for (let match = opening.exec(text); match !== null; match = opening.exec(text)) {
    const name = match[1]!;
    const argsStart = opening.lastIndex;
    if (text.startsWith(CLOSING, argsStart)) {
      directives.push({ name, args: {} });
      opening.lastIndex = argsStart + CLOSING.length;
      continue;
    }
    const parsed = parseArgs(text, argsStart);
    if (parsed === undefined) continue;
    directives.push({ name, args: parsed.args });
    opening.lastIndex = parsed.end;
  }
  return directives;
}

// The arguments may themselves contain "]]" (`{"grid":[[1]]}`), so try each closing in turn
// until the text before it is a JSON object.
function parseArgs(text: string, start: number): { args: Record<string, unknown>; end: number } | undefined {
  if (text[start] !== "{") return undefined;
  for (let close = text.indexOf(CLOSING, start); close !== -1; close = text.indexOf(CLOSING, close + 1)) {
    let value: unknown;
    try {
      value = JSON.parse(text.slice(start, close));
    } catch {
      continue;
    }
    return isRecord(value) ? { args: value, end: close + CLOSING.length } : undefined;
  }
  return undefined;
}
