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
 * The most a window is believed to hold in any dimension: 10^12 requests or tokens, ten
 * thousand times the largest limits providers publish today, and far inside what every
 * reader of an event decodes exactly (2^53).
 */
export const MAX_WINDOW_COUNT = 1_000_000_000_000;

/**
 * The furthest from now a reset, and the longest a retry-after, is believed: 31 days (the
 * longest window providers count by is a month). A provider asking for more is not waited for.
 */
export const MAX_WINDOW_WAIT_MS = 31 * 24 * 3_600_000;

/**
 * Reads a response's rate-limit headers (names lowercased, as Node gives them) at `nowMs`;
 * undefined when it has none that can be used. The one place where a provider's window
 * becomes figures that windows, decisions and `RateLimitObserved` events are built on, so
 * each figure is checked here: a limit or remaining is a whole number (written in decimal
 * digits; a fraction is rounded down) from 0 to MAX_WINDOW_COUNT, and remaining no more
 * than the limit (it is taken as the limit); a reset is at most MAX_WINDOW_WAIT_MS from now
 * (either way) and a retry-after at most that long. Anything else (negative, `NaN`, `1e30`,
 * 2^64, a reset 10^20 s away, a retry-after of years) is not believed: left out as if the
 * provider had not said it (a dimension without a usable remaining is not reported at
 * all), never guessed, and said in words to `problem`, once per response.
 */
export function readRateLimits(
  headers: Headers,
  names: RateLimitHeaderNames,
  nowMs: number,
  problem?: (what: string) => void,
): RateLimitReading | undefined {
  const check = new Check();
  const reading: { -readonly [K in keyof RateLimitReading]: RateLimitReading[K] } = {};
  let found = false;
  for (const [dimension, header] of Object.entries(names.dimensions) as [Dimension, DimensionHeaders][]) {
    const remainingText = first(headers[header.remaining]);
    const remaining = remainingText === undefined ? undefined : check.count(header.remaining, remainingText);
    const limitText = first(headers[header.limit]);
    const limit = limitText === undefined ? undefined : check.count(header.limit, limitText);
    const resetText = first(headers[header.reset]);
    const resetAtMs =
      resetText === undefined ? undefined : check.reset(header.reset, resetText, names.resetFormat, nowMs);
    if (remaining === undefined) continue;
    if (limit !== undefined && remaining > limit) {
      check.say(`${header.remaining} ${remaining} is more than ${header.limit} ${limit}: taken as ${limit}`);
    }
    reading[dimension] = {
      limit,
      remaining: limit === undefined ? remaining : Math.min(remaining, limit),
      resetAtMs,
    };
    found = true;
  }
  const retryAfterMs = check.retryAfter(headers, nowMs);
  if (retryAfterMs !== undefined) {
    reading.retryAfterMs = retryAfterMs;
    found = true;
  }
  if (check.problem !== undefined) problem?.(check.problem);
  return found ? reading : undefined;
}

// A problem is said in a few words; a response with many bad figures gets the first few.
const MAX_PROBLEM_CHARS = 400;
const DECIMAL = /^\d+(?:\.\d+)?$/;

/** The checks of one response's figures, and what was wrong with them, in words. */
class Check {
  problem: string | undefined;

  /** A limit or remaining: a whole number within MAX_WINDOW_COUNT, or undefined (and said). */
  count(name: string, text: string): number | undefined {
    const value = text.trim();
    if (!DECIMAL.test(value)) return this.refuse(`${name} ${quote(value)} is not a count`);
    const n = Math.floor(Number(value));
    if (!(n <= MAX_WINDOW_COUNT)) {
      return this.refuse(
        `${name} ${quote(value)} is more than ${MAX_WINDOW_COUNT}, the most a window is taken to hold`,
      );
    }
    return n;
  }

  /** When a dimension is whole again (ms since the epoch), within MAX_WINDOW_WAIT_MS of now, or undefined (and said). */
  reset(
    name: string,
    text: string,
    format: RateLimitHeaderNames["resetFormat"],
    nowMs: number,
  ): number | undefined {
    const value = text.trim();
    const atMs = format === "duration" ? plus(nowMs, parseDuration(value)) : parseTimestamp(value);
    if (atMs === undefined || !Number.isFinite(atMs)) {
      return this.refuse(
        `${name} ${quote(value)} is not a ${format === "duration" ? "duration" : "timestamp"}`,
      );
    }
    if (Math.abs(atMs - nowMs) > MAX_WINDOW_WAIT_MS) return this.refuse(`${name} ${quote(value)} is ${FAR}`);
    return atMs;
  }

  /**
   * `retry-after-ms` (OpenAI's), else `retry-after` (seconds, or an HTTP date): milliseconds
   * from now, at most MAX_WINDOW_WAIT_MS, or undefined (and said).
   */
  retryAfter(headers: Headers, nowMs: number): number | undefined {
    const msText = first(headers["retry-after-ms"]);
    if (msText !== undefined) {
      const value = msText.trim();
      if (!DECIMAL.test(value)) this.say(`retry-after-ms ${quote(value)} is not a number of milliseconds`);
      else if (Number(value) > MAX_WINDOW_WAIT_MS) this.say(`retry-after-ms ${quote(value)} is ${FAR}`);
      else return Number(value);
    }
    const text = first(headers["retry-after"]);
    if (text === undefined) return undefined;
    const value = text.trim();
    const ms = parseRetryAfter(value, nowMs);
    if (ms === undefined) return this.refuse(`retry-after ${quote(value)} is neither seconds nor a date`);
    if (!(ms <= MAX_WINDOW_WAIT_MS)) return this.refuse(`retry-after ${quote(value)} is ${FAR}`);
    return ms;
  }

  say(what: string): void {
    if (this.problem === undefined) this.problem = what;
    else if (this.problem.length < MAX_PROBLEM_CHARS) this.problem += `; ${what}`;
  }

  private refuse(what: string): undefined {
    this.say(what);
    return undefined;
  }
}

const FAR = `more than ${MAX_WINDOW_WAIT_MS / 86_400_000} days from now, the furthest a window is taken to reach`;

// What a header claims is quoted, never more than this much of it.
const QUOTED = 40;

function quote(text: string): string {
  return JSON.stringify(text.length > QUOTED ? `${text.slice(0, QUOTED)}…` : text);
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

// An HTTP date in any of its three forms starts with the day's name and has a time of day
// (Date.parse alone takes "-5" or "2" for a date in 2001).
const HTTP_DATE = /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? .*\b\d{2}:\d{2}:\d{2}\b/i;

/** `Retry-After`: seconds, or an HTTP date; milliseconds from `nowMs`. */
function parseRetryAfter(text: string, nowMs: number): number | undefined {
  const value = text.trim();
  if (DECIMAL.test(value)) return Number(value) * 1_000;
  if (!HTTP_DATE.test(value)) return undefined;
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(0, at - nowMs) : undefined;
}

function first(value: string | string[] | undefined): string | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  return text === undefined || text.trim() === "" ? undefined : text;
}

function plus(nowMs: number, ms: number | undefined): number | undefined {
  return ms === undefined ? undefined : nowMs + ms;
}
