// What OpenAI's APIs (Chat Completions, Responses) have in common on the wire.
import type { ErrorDialect } from "./api.js";
import { invalidApiKey, invalidRequest, invalidType, missingApiKey, openAiErrorBody } from "./errors.js";
import type { FakeRequest } from "./exchange.js";

export const OPENAI_DIALECT: ErrorDialect = {
  requestIdHeader: "x-request-id",
  errorBody: (error) => openAiErrorBody(error),
};

/** The bearer token; keys starting `sk-bad` are refused, as a revoked key would be. */
export function openAiKey(request: FakeRequest): string {
  const { apiKey } = request;
  if (apiKey === undefined) throw missingApiKey();
  if (apiKey.startsWith("sk-bad")) throw invalidApiKey(apiKey);
  return apiKey;
}

/** Headers on every answer of OpenAI's APIs besides the rate limits. */
export function openAiHeaders(startedAt: number): Record<string, string> {
  return {
    "openai-version": "2020-10-01",
    "openai-processing-ms": String(Math.round(performance.now() - startedAt)),
  };
}

export function optionalBoolean(body: Record<string, unknown>, field: string): boolean | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "boolean") throw invalidType(field, "a boolean", value);
  return value;
}

export function tokenLimit(body: Record<string, unknown>, field: string, minimum = 1): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value)) throw invalidType(field, "an integer", value);
  if (value < minimum) {
    throw invalidRequest(
      `Invalid '${field}': integer below minimum value. Expected a value >= ${minimum}, but got ${value} instead.`,
      field,
      "integer_below_min_value",
    );
  }
  return value;
}

export function optionalString(body: Record<string, unknown>, field: string): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw invalidType(field, "a string", value);
  return value;
}
