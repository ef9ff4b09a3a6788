/**
 * An answer as the agent should read it when a route served its alias with another model:
 * the model it names is the alias. Each API shape names it in one place: at the top of a
 * body or a Chat Completions chunk, under `response` in a Responses stream event, under
 * `message` in Anthropic's `message_start`. Nothing else is touched (a tool's argument
 * called "model" stays as the model wrote it).
 */
export function renameModel(value: unknown, model: string): boolean {
  if (value === null || typeof value !== "object") return false;
  const object = value as Record<string, unknown>;
  let renamed = false;
  if (typeof object.model === "string") {
    object.model = model;
    renamed = true;
  }
  for (const field of ["response", "message"]) {
    const inner = object[field];
    if (
      inner !== null &&
      typeof inner === "object" &&
      typeof (inner as { model?: unknown }).model === "string"
    ) {
      (inner as { model: string }).model = model;
      renamed = true;
    }
  }
  return renamed;
}

/** A JSON body with its model renamed (the body as it was when it is no JSON object). */
export function renamedBody(bytes: Buffer, model: string): Buffer {
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString("utf8"));
  } catch {
    return bytes;
  }
  return renameModel(value, model) ? Buffer.from(JSON.stringify(value)) : bytes;
}

/** One server-sent event (as relayed, its blank line included) with its data's model renamed. */
export function renamedEvent(raw: string, model: string): string {
  if (!raw.includes('"model"')) return raw;
  const lines = raw.split("\n");
  const data: number[] = [];
  for (let i = 0; i < lines.length; i++) if (lines[i]!.startsWith("data:")) data.push(i);
  if (data.length !== 1) return raw;
  const at = data[0]!;
  const line = lines[at]!.replace(/\r$/, "");
  const text = line.slice(line.startsWith("data: ") ? 6 : 5);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return raw;
  }
  if (!renameModel(value, model)) return raw;
  lines[at] = `data: ${JSON.stringify(value)}${lines[at]!.endsWith("\r") ? "\r" : ""}`;
  return lines.join("\n");
}
