import type { IncomingHttpHeaders } from "node:http";
import { invalidRequest } from "./errors.js";
import { isRecord } from "./json.js";

/** The request headers through which a test steers one request, on every API alike. */
export const FAKE_HEADERS = {
  /** Delay before the response headers, in ms. */
  latencyMs: "x-fake-latency-ms",
  /** Delay between stream events, in ms. */
  chunkDelayMs: "x-fake-chunk-delay-ms",
  /** Report this many cached prompt tokens instead of the prompt-cache model's count. */
  cachedTokens: "x-fake-cached-tokens",
  /** Hold a stream after this many events until `resumePaused()`. */
  pauseAfter: "x-fake-pause-after",
  /** A status from 400 to 599, `reset`, `reset-after:N`, `error-after:N[:reset]`, `invalid-json` or `hang`. */
  fail: "x-fake-fail",
  /**
   * A JSON object whose members replace the same-named members of the answer's usage object,
   * in the API's own names (`{"completion_tokens": 3.7}`), whatever their values: a test's
   * provider that reports absurd usage.
   */
  usage: "x-fake-usage",
  /**
   * A JSON object of rate-limit response headers (`x-ratelimit-*`, `anthropic-ratelimit-*`,
   * `retry-after`, `retry-after-ms`) and the text each carries, replacing or adding to the
   * answer's own whatever they say (`{"x-ratelimit-limit-tokens": "18446744073709551616"}`):
   * a test's provider that reports an absurd window.
   */
  rateLimits: "x-fake-rate-limits",
} as const;

/** A failure a test asked for with `x-fake-fail`. */
export type Fault =
  /** Answer with this status and the error body the API sends for it. */
  | { readonly kind: "status"; readonly status: number }
  /** Destroy the connection without answering. */
  | { readonly kind: "reset" }
  /** Send this many stream events (or body bytes), then destroy the connection. */
  | { readonly kind: "reset-after"; readonly after: number }
  /** Send this many stream events, then the API's mid-stream error event, then end (or cut the connection). */
  | { readonly kind: "error-after"; readonly after: number; readonly reset: boolean }
  /** Answer 200 with a whole body (content-length kept) that is not JSON: the answer cut in half. */
  | { readonly kind: "invalid-json" }
  /** Never answer. */
  | { readonly kind: "hang" };

/** What the `FAKE_HEADERS` of one request asked for. */
export interface Controls {
  readonly latencyMs: number | undefined;
  readonly chunkDelayMs: number | undefined;
  readonly cachedTokens: number | undefined;
  readonly pauseAfter: number | undefined;
  readonly fault: Fault | undefined;
  /** Members replacing the answer's usage object's (`x-fake-usage`). */
  readonly usage: Readonly<Record<string, unknown>> | undefined;
  /** Rate-limit headers replacing or adding to the answer's (`x-fake-rate-limits`). */
  readonly rateLimits: Readonly<Record<string, string>> | undefined;
}

/** Reads the controls; a malformed one is a 400 naming the header, never silently ignored. */
export function readControls(headers: IncomingHttpHeaders): Controls {
  return {
    latencyMs: count(headers, FAKE_HEADERS.latencyMs),
    chunkDelayMs: count(headers, FAKE_HEADERS.chunkDelayMs),
    cachedTokens: count(headers, FAKE_HEADERS.cachedTokens),
    pauseAfter: count(headers, FAKE_HEADERS.pauseAfter),
    fault: fault(headers),
    usage: usage(headers),
    rateLimits: rateLimits(headers),
  };
}

// The headers a provider writes its window in: what x-fake-rate-limits may set.
const RATE_LIMIT_HEADER = /^(?:x-ratelimit-[a-z0-9-]+|anthropic-ratelimit-[a-z0-9-]+|retry-after(?:-ms)?)$/;
// What a header value may hold on the wire (no line breaks, no other control characters).
const HEADER_VALUE = /^[\t\x20-\x7e]*$/;

function rateLimits(headers: IncomingHttpHeaders): Record<string, string> | undefined {
  const value = single(headers, FAKE_HEADERS.rateLimits)?.trim();
  if (value === undefined || value === "") return undefined;
  const refuse = (why: string) =>
    invalidRequest(`Invalid ${FAKE_HEADERS.rateLimits} '${value}': ${why}.`, FAKE_HEADERS.rateLimits);
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    parsed = undefined;
  }
  if (!isRecord(parsed)) throw refuse("expected a JSON object of rate-limit headers and their text");
  const out: Record<string, string> = {};
  for (const [name, text] of Object.entries(parsed)) {
    if (!RATE_LIMIT_HEADER.test(name)) {
      throw refuse(
        `${name} is not a rate-limit header (x-ratelimit-*, anthropic-ratelimit-*, retry-after, retry-after-ms)`,
      );
    }
    if (typeof text !== "string" || !HEADER_VALUE.test(text)) {
      throw refuse(`the value of ${name} must be a string a header can carry`);
    }
    out[name] = text;
  }
  return out;
}

function usage(headers: IncomingHttpHeaders): Record<string, unknown> | undefined {
  const value = single(headers, FAKE_HEADERS.usage)?.trim();
  if (value === undefined || value === "") return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    parsed = undefined;
  }
  if (!isRecord(parsed)) {
    throw invalidRequest(
      `Invalid ${FAKE_HEADERS.usage} '${value}': expected a JSON object of usage members.`,
      FAKE_HEADERS.usage,
    );
  }
  return parsed;
}

function fault(headers: IncomingHttpHeaders): Fault | undefined {
  const value = single(headers, FAKE_HEADERS.fail)?.trim().toLowerCase();
  if (value === undefined || value === "") return undefined;
  if (value === "reset") return { kind: "reset" };
  if (value === "hang") return { kind: "hang" };
  if (value === "invalid-json") return { kind: "invalid-json" };
  if (/^[45]\d\d$/.test(value)) return { kind: "status", status: Number(value) };
  const resetAfter = /^reset-after:(\d+)$/.exec(value);
  if (resetAfter !== null) return { kind: "reset-after", after: Number(resetAfter[1]) };
  const errorAfter = /^error-after:(\d+)(:reset)?$/.exec(value);
  if (errorAfter !== null)
    return { kind: "error-after", after: Number(errorAfter[1]), reset: errorAfter[2] !== undefined };
  throw invalidRequest(
    `Invalid ${FAKE_HEADERS.fail} '${value}': expected a status from 400 to 599, reset, reset-after:N, error-after:N[:reset], invalid-json or hang.`,
    FAKE_HEADERS.fail,
  );
}

function count(headers: IncomingHttpHeaders, name: string): number | undefined {
  const value = single(headers, name)?.trim();
  if (value === undefined || value === "") return undefined;
  if (!/^\d+$/.test(value)) {
    throw invalidRequest(`Invalid ${name} '${value}': expected a whole number.`, name);
  }
  return Number(value);
}

function single(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}
