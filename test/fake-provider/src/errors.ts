import { formatDuration } from "./rate-limit.js";

/**
 * Every error the fake sends, in OpenAI's wire shape. The texts copy OpenAI's own where we know
 * them, because clients (and Holdfast's tests) match on them.
 */
export class OpenAiError extends Error {
  override readonly name = "OpenAiError";

  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    /** Extra response headers, such as `retry-after` on a 429. */
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
  }

  get retryable(): boolean {
    return this.status === 429 || this.status >= 500;
  }

  toJSON(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
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
  readonly kind: "requests" | "tokens";
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
 * The error event a stream can end with after a 200: OpenAI sends `data: {"error": …}` when
 * generation fails midway. The message names the key by its last characters, as providers
 * do, so a test can check that even those are kept out of what Holdfast records.
 */
export function streamError(apiKey: string): string {
  const error = new OpenAiError(
    500,
    `The server had an error while generating for the key ending in ${apiKey.slice(-4)}. Please retry.`,
    "server_error",
    null,
    "generation_failed",
  );
  return `data: ${JSON.stringify(error)}\n\n`;
}
