/** A JSON object: not null, not an array. Provider payloads are untrusted until checked. */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A string with something in it, else undefined: providers send "" where they mean none. */
export function nonEmptyString(value: unknown): string | undefined {
  return typeof value === "string" && value.length > 0 ? value : undefined;
}

/** A string as is, anything else as "". */
export function stringOr(value: unknown): string {
  return typeof value === "string" ? value : "";
}

/** Whether text may be a JSON object, without parsing it: its first non-blank character is `{`. */
export function startsLikeObject(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === 0x7b /* { */) return true;
    if (code !== 0x20 && code !== 0x09 && code !== 0x0a && code !== 0x0d) return false;
  }
  return false;
}

/** JSON text parsed into an object, or undefined for anything else (invalid, an array, a scalar). */
export function parseObject(text: string): Record<string, unknown> | undefined {
  if (!startsLikeObject(text)) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  return isRecord(value) ? value : undefined;
}

/** A positive integer, or undefined for anything else. */
export function positiveInt(value: unknown): number | undefined {
  return typeof value === "number" && Number.isInteger(value) && value > 0 ? value : undefined;
}
