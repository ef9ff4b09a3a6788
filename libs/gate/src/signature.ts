import { createHash } from "node:crypto";
import type { ToolCall } from "@holdfast/providers";

/**
 * One digest for an answer's tool calls: each tool's name with its arguments parsed as
 * JSON and written back with keys sorted (so key order and spacing do not matter), in the
 * answer's order. "" for an answer that asks for none. Arguments that are not JSON count as
 * their text.
 */
export function toolCallsSignature(toolCalls: readonly ToolCall[]): string {
  if (toolCalls.length === 0) return "";
  const canonical = toolCalls.map((call) => [call.name, canonicalArguments(call.arguments)]);
  return createHash("sha256").update(JSON.stringify(canonical)).digest("hex").slice(0, 32);
}

function canonicalArguments(text: string): unknown {
  if (text.trim() === "") return {};
  try {
    return sortKeys(JSON.parse(text));
  } catch {
    return { unparsed: text };
  }
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== "object") return value;
  const sorted: Record<string, unknown> = {};
  for (const key of Object.keys(value).sort())
    sorted[key] = sortKeys((value as Record<string, unknown>)[key]);
  return sorted;
}

/** Hex SHA-256 of a body: what a gate decision names the request and the answer by. */
export function contentHash(body: Buffer | string): string {
  return createHash("sha256").update(body).digest("hex");
}
