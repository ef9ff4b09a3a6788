import {
  type Dimension,
  MAX_WINDOW_COUNT,
  MAX_WINDOW_WAIT_MS,
  type RateLimitReading,
  type WindowReading,
} from "./headers.js";
import type { WindowShape } from "./shape.js";

/**
 * When the call a recorded reading answers was sent: as recorded (`asOfMs`, 0 when not
 * said: when it was recorded), but never after it was recorded nor after `nowMs`. Readings
 * older than the newest taken in are dropped, so a send time in the future (a peer's clock,
 * or a forged figure) would otherwise have every later reading of the key dropped.
 */
export function asOfOfRecorded(asOfMs: number, recordedAtMs: number, nowMs: number): number {
  const said = asOfMs > 0 ? asOfMs : recordedAtMs;
  return Math.min(said, recordedAtMs, nowMs);
}

/** One dimension of a recorded reading (the RateWindow of a RateLimitObserved event). */
export interface RecordedWindow {
  readonly reported: boolean;
  readonly limit: number;
  readonly remaining: number;
  readonly resetAtMs: number;
  /** How the recording gateway took the window to refill (empty before shapes were read). */
  readonly shape?: string;
}

/** A recorded reading (a RateLimitObserved event's payload), as far as a window takes it in. */
export interface RecordedReading {
  readonly requests: RecordedWindow | undefined;
  readonly tokens: RecordedWindow | undefined;
  readonly inputTokens: RecordedWindow | undefined;
  readonly outputTokens: RecordedWindow | undefined;
  readonly retryAfterMs: number;
}

/**
 * A recorded reading as a window takes it in: what was not reported stays undefined. A
 * gateway checks a reading before recording it (readRateLimits); one recorded before it
 * did, or by something else with a gateway's credential, is held to the same bounds here
 * (`readAtMs`: when it was recorded), so an absurd figure in the log cannot keep a key's
 * window shut for years: a figure past them is taken as not reported.
 */
export function readingOfRecorded(recorded: RecordedReading, readAtMs: number): RateLimitReading {
  const reading: { -readonly [K in keyof RateLimitReading]: RateLimitReading[K] } = {};
  for (const dimension of [
    "requests",
    "tokens",
    "inputTokens",
    "outputTokens",
  ] as const satisfies Dimension[]) {
    const window = recorded[dimension];
    if (window?.reported !== true || !(window.remaining >= 0 && window.remaining <= MAX_WINDOW_COUNT))
      continue;
    const limit = window.limit > 0 && window.limit <= MAX_WINDOW_COUNT ? window.limit : undefined;
    const read: WindowReading = {
      limit,
      remaining: limit === undefined ? window.remaining : Math.min(window.remaining, limit),
      resetAtMs:
        window.resetAtMs > 0 && Math.abs(window.resetAtMs - readAtMs) <= MAX_WINDOW_WAIT_MS
          ? window.resetAtMs
          : undefined,
    };
    reading[dimension] = read;
  }
  if (recorded.retryAfterMs > 0 && recorded.retryAfterMs <= MAX_WINDOW_WAIT_MS) {
    reading.retryAfterMs = recorded.retryAfterMs;
  }
  return reading;
}

const SHAPES: ReadonlySet<string> = new Set<WindowShape>(["continuous", "fixed", "sliding", "irregular"]);

/**
 * The shapes a recorded reading says its gateway had learnt, per dimension it reported:
 * only those a gateway can have learnt (`unknown`, an empty field from before shapes
 * were read, and anything else are left out).
 */
export function shapesOfRecorded(recorded: RecordedReading): Partial<Record<Dimension, WindowShape>> {
  const shapes: Partial<Record<Dimension, WindowShape>> = {};
  for (const dimension of ["requests", "tokens", "inputTokens", "outputTokens"] as const) {
    const window = recorded[dimension];
    if (window?.reported === true && window.shape !== undefined && SHAPES.has(window.shape)) {
      shapes[dimension] = window.shape as WindowShape;
    }
  }
  return shapes;
}
