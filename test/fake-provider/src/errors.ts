import { formatDuration, type LimitKind } from "./rate-limit.js";

/**
 * An error the fake answers with on purpose: a status, a message and extra headers. Each API
 * writes it in its own dialect; an error from code the APIs share (a bad `x-fake-*` header, a
 * bug in the fake) is an OpenAiError and is translated where another dialect needs it.
 */
export abstract class ProviderError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** Extra response headers, such as `retry-after` on a 429. */
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }

  get retryable(): boolean {
    return this.status === 429 || this.status >= 500;
  }
}

/**
 * Every error of the OpenAI APIs, in OpenAI's wire shape. The texts copy OpenAI's own where we
 * know them, because clients (and Holdfast's tests) match on them.
 */
export class OpenAiError extends ProviderError {
  override readonly name = "OpenAiError";

  constructor(
    status: number,
    message: string,
    readonly type: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    headers: Readonly<Record<string, string>> = {},
  ) {
    super(status, message, headers);
  }

  toJSON(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** Anthropic names an error's type after its status, one type per status. */
const ANTHROPIC_TYPES: Readonly<Record<number, string>> = {
  400: "invalid_request_error",
  401: "authentication_error",
  402: "billing_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  500: "api_error",
  504: "timeout_error",
  529: "overloaded_error",
};

/** An error of Anthropic's Messages API. */
export class AnthropicError extends ProviderError {
  override readonly name = "AnthropicError";
  readonly type: string;

  constructor(status: number, message: string, headers: Readonly<Record<string, string>> = {}) {
    super(status, message, headers);
    this.type = ANTHROPIC_TYPES[status] ?? (status >= 500 ? "api_error" : "invalid_request_error");
  }

  /** The same failure as Anthropic would word its type. */
  static from(error: ProviderError): AnthropicError {
    return error instanceof AnthropicError
      ? error
      : new AnthropicError(error.status, error.message, error.headers);
  }

  /**
   * Anthropic's envelope. An answer repeats its `request-id` header in the body; an error event
   * inside a stream has none.
   */
  body(requestId?: string): { type: "error"; error: { type: string; message: string }; request_id?: string } {
    const body = { type: "error" as const, error: { type: this.type, message: this.message } };
    return requestId === undefined ? body : { ...body, request_id: requestId };
  }
}

/** An error from any part of the fake, as an OpenAI API sends it. */
export function openAiErrorBody(error: ProviderError): string {
  if (error instanceof OpenAiError) return JSON.stringify(error);
  const type = error.status >= 500 ? "server_error" : "invalid_request_error";
  return JSON.stringify(new OpenAiError(error.status, error.message, type));
}

/** An error from any part of the fake, as Anthropic's API sends it. */
export function anthropicErrorBody(error: ProviderError, requestId: string): string {
  return JSON.stringify(AnthropicError.from(error).body(requestId));
}

const KEYS_PAGE = "https://platform.openai.com/account/api-keys";

export function missingApiKey(): OpenAiError {
  return new OpenAiError(
    401,
    "You didn't provide an API key. You need to provide your API key in an Authorization header using " +
      "Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) " +
      "if you're accessing the API from your browser and are prompted for a username and password. " +
      `You can obtain an API key from ${KEYS_PAGE}.`,
    "invalid_request_error",
  );
}

/**
 * OpenAI echoes part of a rejected key back. The fake does the same on purpose, so Holdfast's
 * tests can prove that no fragment of a key survives into what Holdfast stores.
 */
export function invalidApiKey(apiKey: string): OpenAiError {
  return new OpenAiError(
    401,
    `Incorrect API key provided: ${maskApiKey(apiKey)}. You can find your API key at ${KEYS_PAGE}.`,
    "invalid_request_error",
    null,
    "invalid_api_key",
  );
}

export function maskApiKey(apiKey: string): string {
  const tail = apiKey.length > 10 ? apiKey.slice(-4) : "";
  return `${apiKey.slice(0, 6)}${"*".repeat(Math.max(3, apiKey.length - 10))}${tail}`;
}

export function invalidJson(): OpenAiError {
  return new OpenAiError(
    400,
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your " +
      "HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. " +
      "If you have trouble figuring out how to fix this, please contact us through our help center at " +
      "help.openai.com.)",
    "invalid_request_error",
  );
}

export function invalidRequest(
  message: string,
  param: string | null,
  code: string | null = null,
): OpenAiError {
  return new OpenAiError(400, message, "invalid_request_error", param, code);
}

export function missingParameter(param: string): OpenAiError {
  return invalidRequest(`Missing required parameter: '${param}'.`, param, "missing_required_parameter");
}

export function invalidType(param: string, expected: string, value: unknown): OpenAiError {
  return invalidRequest(
    `Invalid type for '${param}': expected ${expected}, but got ${describeType(value)} instead.`,
    param,
    "invalid_type",
  );
}

export function invalidUrl(method: string, path: string): OpenAiError {
  return new OpenAiError(404, `Invalid URL (${method} ${path})`, "invalid_request_error");
}

export function modelNotFound(model: string): OpenAiError {
  return new OpenAiError(
    404,
    `The model \`${model}\` does not exist or you do not have access to it.`,
    "invalid_request_error",
    null,
    "model_not_found",
  );
}

export function serverError(): OpenAiError {
  return new OpenAiError(
    500,
    "The server had an error while processing your request. Sorry about that!",
    "server_error",
  );
}

/** The error a test asked for with `x-fake-fail: <status>`. */
export function injectedFailure(status: number, model: string): OpenAiError {
  switch (status) {
    case 404:
      return modelNotFound(model);
    case 429:
      return new OpenAiError(
        429,
        `Rate limit reached for ${model} in organization org-fake on requests per min (RPM). ` +
          "Please try again in 1s.",
        "requests",
        null,
        "rate_limit_exceeded",
        { "retry-after": "1", "retry-after-ms": "1000" },
      );
    case 500:
      return serverError();
    case 503:
      return new OpenAiError(503, "The server is overloaded or not ready yet.", "server_error");
    default:
      return new OpenAiError(
        status,
        `Failure injected by x-fake-fail: ${status}`,
        status >= 500 ? "server_error" : "invalid_request_error",
      );
  }
}

export interface RateLimitRefusal {
  readonly model: string;
  readonly kind: LimitKind;
  readonly limit: number;
  readonly used: number;
  readonly requested: number;
  readonly retryAfterMs: number;
}

const RATE_LIMITS_PAGE = "https://platform.openai.com/account/rate-limits";

export function rateLimitExceeded(refusal: RateLimitRefusal): OpenAiError {
  const { model, kind, limit, used, requested, retryAfterMs } = refusal;
  const per = kind === "tokens" ? "tokens per min (TPM)" : "requests per min (RPM)";
  // Waiting cannot help a request larger than the whole bucket, so OpenAI sends no retry-after.
  if (!Number.isFinite(retryAfterMs)) {
    return new OpenAiError(
      429,
      `Request too large for ${model} in organization org-fake on ${per}: Limit ${limit}, ` +
        `Requested ${requested}. The input or output tokens must be reduced in order to run successfully. ` +
        `Visit ${RATE_LIMITS_PAGE} to learn more.`,
      kind,
      null,
      "rate_limit_exceeded",
    );
  }
  return new OpenAiError(
    429,
    `Rate limit reached for ${model} in organization org-fake on ${per}: Limit ${limit}, Used ${used}, ` +
      `Requested ${requested}. Please try again in ${formatDuration(retryAfterMs)}. ` +
      `Visit ${RATE_LIMITS_PAGE} to learn more.`,
    kind,
    null,
    "rate_limit_exceeded",
    {
      "retry-after": String(Math.max(1, Math.ceil(retryAfterMs / 1000))),
      "retry-after-ms": String(Math.ceil(retryAfterMs)),
    },
  );
}

function describeType(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "number") return Number.isInteger(value) ? "an integer" : "a decimal";
  if (typeof value === "object") return "an object";
  return `a ${typeof value}`;
}

/**
 * The error a stream can end with after a 200, when generation fails midway. The message names
 * the key by its last characters, as providers do, so a test can check that even those are kept
 * out of what Holdfast records.
 */
export function generationFailed(apiKey: string): OpenAiError {
  return new OpenAiError(
    500,
    `The server had an error while generating for the key ending in ${apiKey.slice(-4)}. Please retry.`,
    "server_error",
    null,
    "generation_failed",
  );
}

export function previousResponseNotFound(id: string): OpenAiError {
  return invalidRequest(
    `Previous response with id '${id}' not found.`,
    "previous_response_id",
    "previous_response_not_found",
  );
}

// Anthropic's texts, copied where known.

export function anthropicMissingKey(): AnthropicError {
  return new AnthropicError(401, "x-api-key header is required");
}

export function anthropicInvalidKey(): AnthropicError {
  return new AnthropicError(401, "invalid x-api-key");
}

/**
 * The versions of the Messages API the fake accepts in `anthropic-version`: the long-standing
 * ones, and the one `@anthropic-ai/sdk` 1.x sends.
 */
export const ANTHROPIC_VERSIONS: ReadonlySet<string> = new Set(["2023-01-01", "2023-06-01", "2026-10-21"]);

export function missingAnthropicVersion(): AnthropicError {
  return new AnthropicError(400, "anthropic-version: header is required");
}

export function invalidAnthropicVersion(version: string): AnthropicError {
  return new AnthropicError(400, `anthropic-version: "${version}" is not a valid version`);
}

/** `field` is a dotted path into the body, as Anthropic's validation messages name it. */
export function anthropicInvalid(field: string, problem: string): AnthropicError {
  return new AnthropicError(400, `${field}: ${problem}`);
}

export function anthropicInvalidJson(): AnthropicError {
  return new AnthropicError(400, "The request body is not valid JSON.");
}

const ANTHROPIC_ORG = "00000000-0000-4000-8000-00000000fa4e";
const ANTHROPIC_LIMIT_UNITS: Readonly<Record<LimitKind, string>> = {
  requests: "requests",
  tokens: "tokens",
  "input-tokens": "input tokens",
  "output-tokens": "output tokens",
};

export function anthropicRateLimited(refusal: RateLimitRefusal): AnthropicError {
  const { model, kind, limit, retryAfterMs } = refusal;
  return new AnthropicError(
    429,
    `This request would exceed your organization's rate limit of ${limit.toLocaleString("en-US")} ` +
      `${ANTHROPIC_LIMIT_UNITS[kind]} per minute (org: ${ANTHROPIC_ORG}, model: ${model}). ` +
      "For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers " +
      "for current usage. Please reduce the prompt length or the maximum tokens requested, or try again " +
      "later. You may also contact sales at https://claude.com/contact-sales to discuss your options for a " +
      "rate limit increase.",
    // Waiting cannot help a request larger than the whole bucket: no retry-after then.
    Number.isFinite(retryAfterMs)
      ? { "retry-after": String(Math.max(1, Math.ceil(retryAfterMs / 1000))) }
      : {},
  );
}

export function anthropicOverloaded(): AnthropicError {
  return new AnthropicError(529, "Overloaded");
}

/** The error a test asked for with `x-fake-fail: <status>` on Anthropic's API. */
export function anthropicInjectedFailure(status: number, model: string): AnthropicError {
  switch (status) {
    case 401:
      return anthropicInvalidKey();
    case 403:
      return new AnthropicError(403, "Your API key does not have permission to use the specified resource.");
    case 404:
      return new AnthropicError(404, `model: ${model}`);
    case 429:
      return new AnthropicError(
        429,
        "This request would exceed your organization's rate limit. For details, refer to: " +
          "https://docs.claude.com/en/api/rate-limits.",
        { "retry-after": "1" },
      );
    case 500:
      return new AnthropicError(500, "Internal server error");
    case 529:
      return anthropicOverloaded();
    default:
      return new AnthropicError(status, `Failure injected by x-fake-fail: ${status}`);
  }
}
