import { createHash } from "node:crypto";

/** JSON with object keys sorted, so equal values hash alike whatever order their keys came in. */
export function stableJson(value: unknown): string {
  return JSON.stringify(value, (_key, field: unknown) => {
    if (typeof field !== "object" || field === null || Array.isArray(field)) return field;
    const sorted: Record<string, unknown> = {};
    for (const key of Object.keys(field).sort()) sorted[key] = (field as Record<string, unknown>)[key];
    return sorted;
  });
}

/** A hex digest for ids that must stay the same for the same request. */
export function digest(...parts: readonly string[]): string {
  const hash = createHash("sha256");
  for (const part of parts) hash.update(part).update("\0");
  return hash.digest("hex");
}

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** `length` base-62 characters drawn from a hex string of at least twice that length. */
export function base62(hex: string, length: number): string {
  let text = "";
  for (let index = 0; index < length; index += 1) {
    text += BASE62[Number.parseInt(hex.slice(index * 2, index * 2 + 2), 16) % BASE62.length];
  }
  return text;
}
