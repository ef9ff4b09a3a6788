import type { Dimension, RateLimitReading, WindowReading } from "./headers.js";

/** One dimension of a recorded reading (the RateWindow of a RateLimitObserved event). */
export interface RecordedWindow {
  readonly reported: boolean;
  readonly limit: number;
  readonly remaining: number;
  readonly resetAtMs: number;
}

/** A recorded reading (a RateLimitObserved event's payload), as far as a window takes it in. */
export interface RecordedReading {
  readonly requests: RecordedWindow | undefined;
  readonly tokens: RecordedWindow | undefined;
  readonly inputTokens: RecordedWindow | undefined;
  readonly outputTokens: RecordedWindow | undefined;
  readonly retryAfterMs: number;
}

/** A recorded reading as a window takes it in: what was not reported stays undefined. */
export function readingOfRecorded(recorded: RecordedReading): RateLimitReading {
  const reading: { -readonly [K in keyof RateLimitReading]: RateLimitReading[K] } = {};
  for (const dimension of [
    "requests",
    "tokens",
    "inputTokens",
    "outputTokens",
  ] as const satisfies Dimension[]) {
    const window = recorded[dimension];
    if (window?.reported !== true) continue;
    const read: WindowReading = {
      limit: window.limit > 0 ? window.limit : undefined,
      remaining: window.remaining,
      resetAtMs: window.resetAtMs > 0 ? window.resetAtMs : undefined,
    };
    reading[dimension] = read;
  }
  if (recorded.retryAfterMs > 0) reading.retryAfterMs = recorded.retryAfterMs;
  return reading;
}
