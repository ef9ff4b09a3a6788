/**
 * What a provider's response says of its key's rate-limit window, one dimension at a time
 * (requests, tokens, and Anthropic's input and output tokens). A dimension the response
 * does not mention is undefined; `retryAfterMs` is set when the provider asked to wait.
 */
export interface RateLimitReading {
  readonly requests?: WindowReading;
  readonly tokens?: WindowReading;
  readonly inputTokens?: WindowReading;
  readonly outputTokens?: WindowReading;
  readonly retryAfterMs?: number;
}

/** One dimension of a window as read: its size, what is left, and when it is whole again. */
export interface WindowReading {
  /** Undefined when the provider did not say. */
  readonly limit: number | undefined;
  readonly remaining: number;
  /** Milliseconds since the epoch at which the window is full again; undefined when unsaid. */
  readonly resetAtMs: number | undefined;
}

export type Dimension = "requests" | "tokens" | "inputTokens" | "outputTokens";

/** The header names of one dimension. */
export interface DimensionHeaders {
  readonly limit: string;
  readonly remaining: string;
  readonly reset: string;
}

/** Which headers carry a provider's window: per dimension, and how resets are written. */
export interface RateLimitHeaderNames {
  readonly dimensions: Partial<Readonly<Record<Dimension, DimensionHeaders>>>;
  /** "duration": `1s`, `6m0s`, `7.66s`, `120ms` (OpenAI, Groq); "timestamp": RFC 3339 (Anthropic). */
  readonly resetFormat: "duration" | "timestamp";
}

const openAi = (what: string): DimensionHeaders => ({
  limit: `x-ratelimit-limit-${what}`,
  remaining: `x-ratelimit-remaining-${what}`,
  reset: `x-ratelimit-reset-${what}`,
});
const anthropic = (what: string): DimensionHeaders => ({
  limit: `anthropic-ratelimit-${what}-limit`,
  remaining: `anthropic-ratelimit-${what}-remaining`,
  reset: `anthropic-ratelimit-${what}-reset`,
});

/** OpenAI's (and Groq's, and most OpenAI-compatible providers') header names. */
export const OPENAI_HEADERS: RateLimitHeaderNames = {
  dimensions: { requests: openAi("requests"), tokens: openAi("tokens") },
  resetFormat: "duration",
};

/** Anthropic's header names. */
export const ANTHROPIC_HEADERS: RateLimitHeaderNames = {
  dimensions: {
    requests: anthropic("requests"),
    tokens: anthropic("tokens"),
    inputTokens: anthropic("input-tokens"),
    outputTokens: anthropic("output-tokens"),
  },
  resetFormat: "timestamp",
};

type Headers = Readonly<Record<string, string | string[] | undefined>>;

/**
 * Reads a response's rate-limit headers (names lowercased, as Node gives them) at `nowMs`;
 * undefined when it has none. Values that do not parse are left out, never guessed.
 */
export function readRateLimits(
  headers: Headers,
  names: RateLimitHeaderNames,
  nowMs: number,
): RateLimitReading | undefined {
  const reading: { -readonly [K in keyof RateLimitReading]: RateLimitReading[K] } = {};
  let found = false;
  for (const [dimension, header] of Object.entries(names.dimensions) as [Dimension, DimensionHeaders][]) {
    const remaining = count(first(headers[header.remaining]));
    if (remaining === undefined) continue;
    const reset = first(headers[header.reset]);
    reading[dimension] = {
      limit: count(first(headers[header.limit])),
      remaining,
      resetAtMs:
        reset === undefined
          ? undefined
          : names.resetFormat === "duration"
            ? plus(nowMs, parseDuration(reset))
            : parseTimestamp(reset),
    };
    found = true;
  }
  const retryAfter = first(headers["retry-after-ms"]) ?? first(headers["retry-after"]);
  if (retryAfter !== undefined) {
    const ms =
      headers["retry-after-ms"] !== undefined
        ? nonNegative(Number(retryAfter))
        : parseRetryAfter(retryAfter, nowMs);
    if (ms !== undefined) {
      reading.retryAfterMs = ms;
      found = true;
    }
  }
  return found ? reading : undefined;
}

const UNIT_MS: Readonly<Record<string, number>> = {
  h: 3_600_000,
  m: 60_000,
  s: 1_000,
  ms: 1,
  us: 0.001,
  µs: 0.001,
  ns: 0.000001,
};
const DURATION = /^(?:(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns))+$/;
const PART = /(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)/g;

/**
 * A Go-style duration as OpenAI and Groq write resets: `1s`, `6m0s`, `7.66s`, `120ms`,
 * `1h2m3.5s`; a bare number is seconds. Milliseconds, or undefined when it is not one.
 */
export function parseDuration(text: string): number | undefined {
  const value = text.trim();
  if (/^\d+(\.\d+)?$/.test(value)) return Number(value) * 1_000;
  if (!DURATION.test(value)) return undefined;
  let ms = 0;
  for (const [, amount, unit] of value.matchAll(PART)) ms += Number(amount) * UNIT_MS[unit!]!;
  return ms;
}

/** An RFC 3339 timestamp (Anthropic's resets), as milliseconds since the epoch. */
export function parseTimestamp(text: string): number | undefined {
  if (!/^\d{4}-\d{2}-\d{2}T/.test(text.trim())) return undefined;
  const ms = Date.parse(text.trim());
  return Number.isFinite(ms) ? ms : undefined;
}

/** `Retry-After`: seconds, or an HTTP date; milliseconds from `nowMs`. */
function parseRetryAfter(text: string, nowMs: number): number | undefined {
  const value = text.trim();
  if (/^\d+(\.\d+)?$/.test(value)) return Number(value) * 1_000;
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(0, at - nowMs) : undefined;
}

function first(value: string | string[] | undefined): string | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  return text === undefined || text.trim() === "" ? undefined : text;
}

function count(text: string | undefined): number | undefined {
  return text === undefined ? undefined : nonNegative(Number(text));
}

function nonNegative(value: number): number | undefined {
  return Number.isFinite(value) && value >= 0 ? value : undefined;
}

function plus(nowMs: number, ms: number | undefined): number | undefined {
  return ms === undefined ? undefined : nowMs + ms;
}
