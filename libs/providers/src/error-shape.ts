import { STATUS_CODES } from "node:http";
import { isRecord } from "./json.js";
import { scrubSecrets } from "./secrets.js";

/** An error in OpenAI's wire shape, which OpenAI SDKs parse into their exceptions. */
export interface OpenAIErrorBody {
  readonly error: {
    readonly message: string;
    readonly type: string;
    readonly param: string | null;
    readonly code: string | null;
  };
}

export interface OpenAIErrorFields {
  readonly type?: string;
  readonly param?: string | null;
  readonly code?: string | null;
}

export function openAIErrorBody(message: string, fields: OpenAIErrorFields = {}): OpenAIErrorBody {
  return {
    error: {
      message,
      type: fields.type ?? "invalid_request_error",
      param: fields.param ?? null,
      code: fields.code ?? null,
    },
  };
}

/** An error in Anthropic's wire shape, which Anthropic SDKs parse into their exceptions. */
export interface AnthropicErrorBody {
  readonly type: "error";
  readonly error: { readonly type: string; readonly message: string };
}

// Anthropic's error types for the kinds of error the gateway answers itself.
const ANTHROPIC_TYPE: Record<string, string> = {
  server_error: "api_error",
  invalid_request_error: "invalid_request_error",
  authentication_error: "authentication_error",
  permission_error: "permission_error",
  not_found_error: "not_found_error",
  rate_limit_error: "rate_limit_error",
  overloaded_error: "overloaded_error",
  tool_call_denied: "permission_error",
};

/** The same error in Anthropic's envelope; it has no `code` or `param`, so the message carries them. */
export function anthropicErrorBody(message: string, fields: OpenAIErrorFields = {}): AnthropicErrorBody {
  return {
    type: "error",
    error: { type: ANTHROPIC_TYPE[fields.type ?? ""] ?? "invalid_request_error", message },
  };
}

/** A provider's error, read from its response and safe to record. */
export interface ProviderError {
  readonly type: string;
  readonly code: string | null;
  readonly message: string;
}

const MAX_MESSAGE = 500;
const MAX_LABEL = 100;

/**
 * Reads an upstream error response or stream error event: OpenAI's
 * `{error:{message,type,code}}`, Anthropic's and the Responses API's
 * `{type:"error",error:{type,message}}`, the Responses API's documented flat
 * `{type:"error",code,message}`, Google's `{error:{code,message,status}}` (bare or in an
 * array), Mistral's top-level `{message,type,code}`. What is missing comes from the HTTP
 * status. Every field is scrubbed of secrets, since providers echo keys back in auth
 * errors, and the message is bounded.
 */
export function readProviderError(
  status: number,
  bodyText: string,
  secrets: readonly string[],
): ProviderError {
  const error = errorObject(bodyText);
  const message = error !== undefined && typeof error.message === "string" ? error.message : undefined;
  const type = firstString(error?.type, error?.status) ?? typeForStatus(status);
  const rawCode = error?.code;
  const code = typeof rawCode === "string" ? rawCode : typeof rawCode === "number" ? String(rawCode) : null;
  return {
    type: bounded(scrubSecrets(type, secrets), MAX_LABEL),
    code: code === null ? null : bounded(scrubSecrets(code, secrets), MAX_LABEL),
    // Scrubbed before truncating: a cut through a secret would hide it from the exact match.
    message: bounded(scrubSecrets(message ?? statusText(status), secrets), MAX_MESSAGE),
  };
}

function errorObject(bodyText: string): Record<string, unknown> | undefined {
  let body: unknown;
  try {
    body = JSON.parse(bodyText);
  } catch {
    return undefined;
  }
  if (Array.isArray(body)) body = body[0];
  if (!isRecord(body)) return undefined;
  if (isRecord(body.error)) return body.error;
  if (typeof body.error === "string") return { message: body.error };
  if (typeof body.message !== "string") return undefined;
  // The Responses API's `error` event as its reference documents it: the fields beside
  // `type: "error"`, which names the event, not the kind of error.
  if (body.type === "error") return { message: body.message, code: body.code };
  // Mistral puts the fields at the top level.
  return body;
}

function firstString(...values: unknown[]): string | undefined {
  for (const value of values) if (typeof value === "string" && value.length > 0) return value;
  return undefined;
}

/**
 * The error type OpenAI itself uses for a status, so clients branch the same way. An
 * error inside a successful response (a stream that failed midway) is the provider's.
 */
function typeForStatus(status: number): string {
  if (status < 300) return "api_error";
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 409:
      return "conflict_error";
    case 422:
      return "unprocessable_entity_error";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

function statusText(status: number): string {
  const text = STATUS_CODES[status];
  return text === undefined ? `HTTP ${status}` : `${status} ${text}`;
}

function bounded(text: string, max: number): string {
  if (text.length <= max) return text;
  // Never end on half of a surrogate pair: the cut text must stay valid UTF-16.
  const end = isHighSurrogate(text.charCodeAt(max - 1)) ? max - 1 : max;
  return text.slice(0, end);
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}
