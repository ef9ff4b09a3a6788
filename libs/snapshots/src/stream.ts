/**
 * A streamed answer's text is spread over its events, a few characters each: a credential
 * the model streams is in no one event's string, so cleaning each string finds nothing.
 * This reads the text the events carry joined (every string they stream: content, text,
 * deltas, tool arguments), cleans it whole, and where cleaning changed it, writes the
 * cleaned text back over the events that carried the changed part: the first of them
 * holds it, the others give up theirs. The stream joins to the cleaned text, and every
 * event keeps its place; only the events a credential ran through are rewritten.
 */

/** Keys whose string values a stream sends a piece at a time. */
const STREAMED = new Set(["content", "text", "delta", "arguments", "partial_json", "refusal", "thinking"]);

interface Carrier {
  /** Which line of the stream, and the JSON it holds. */
  readonly line: number;
  readonly json: unknown;
  /** Where in that JSON the string is: the object and its key. */
  readonly holder: Record<string, unknown>;
  readonly key: string;
  /** Where it falls in the joined text. */
  readonly start: number;
  readonly end: number;
}

/** `events` (SSE text, already cleaned string by string) with what its joined text held cleaned too. */
export function redactStream(events: string, clean: (value: string) => string): string {
  const lines = events.split("\n");
  const carriers: Carrier[] = [];
  let joined = "";
  const parsed = new Map<number, unknown>();
  for (const [i, line] of lines.entries()) {
    if (!line.startsWith("data:")) continue;
    const data = line.slice(line.startsWith("data: ") ? 6 : 5).replace(/\r$/, "");
    if (!data.startsWith("{")) continue;
    let json: unknown;
    try {
      json = JSON.parse(data);
    } catch {
      continue;
    }
    parsed.set(i, json);
    visit(json, (holder, key, value) => {
      carriers.push({ line: i, json, holder, key, start: joined.length, end: joined.length + value.length });
      joined += value;
    });
  }
  if (joined === "") return events;
  const cleaned = clean(joined);
  if (cleaned === joined) return events;
  // The part that changed: from the first character that differs to the last.
  let head = 0;
  while (head < joined.length && head < cleaned.length && joined[head] === cleaned[head]) head += 1;
  let tail = 0;
  while (
    tail < joined.length - head &&
    tail < cleaned.length - head &&
    joined[joined.length - 1 - tail] === cleaned[cleaned.length - 1 - tail]
  )
    tail += 1;
  const changedEnd = joined.length - tail;
  const replacement = cleaned.slice(head, cleaned.length - tail);
  const touched = carriers.filter((c) => c.end > head && c.start < changedEnd);
  if (touched.length === 0) return events;
  const rewritten = new Set<number>();
  const last = touched.length - 1;
  for (const [n, carrier] of touched.entries()) {
    const own = joined.slice(carrier.start, carrier.end);
    const before = carrier.start < head ? own.slice(0, head - carrier.start) : "";
    const after = carrier.end > changedEnd ? own.slice(changedEnd - carrier.start) : "";
    // The first carrier takes the whole replacement; the last keeps what follows it; any
    // between give up theirs.
    carrier.holder[carrier.key] =
      n === 0 ? before + replacement + (last === 0 ? after : "") : n === last ? after : "";
    rewritten.add(carrier.line);
  }
  for (const i of rewritten) {
    const line = lines[i]!;
    const prefix = line.startsWith("data: ") ? "data: " : "data:";
    const cr = line.endsWith("\r") ? "\r" : "";
    lines[i] = `${prefix}${JSON.stringify(parsed.get(i))}${cr}`;
  }
  return lines.join("\n");
}

/** Every string under a streamed key, in document order. */
function visit(
  value: unknown,
  found: (holder: Record<string, unknown>, key: string, text: string) => void,
): void {
  if (Array.isArray(value)) {
    for (const item of value) visit(item, found);
    return;
  }
  if (value === null || typeof value !== "object") return;
  const holder = value as Record<string, unknown>;
  for (const [key, child] of Object.entries(holder)) {
    if (typeof child === "string") {
      if (STREAMED.has(key)) found(holder, key, child);
    } else visit(child, found);
  }
}
