import { isKnown, makeEnvelope, type StoredEnvelope } from "@holdfast/events";
import type { Logger } from "@holdfast/log";
import {
  asOfOfRecorded,
  type Dimension,
  type RateLimitReading,
  readingOfRecorded,
  readRateLimits,
  SECOND_RESOLUTION_MS,
  shapesOfRecorded,
} from "@holdfast/predict";
import type { Envelope, RateLimitObserved, RateWindow } from "@holdfast/proto";
import type { Call, UpstreamAnswer } from "../pipeline/hooks.js";
import type { Key, Keys } from "./key.js";
import { refusalOnly } from "./policy.js";

// A provider's rate-limit figures past their bounds are told at most this often per key.
const PROBLEM_EVERY_MS = 60_000;
const WARNED_KEPT = 10_000;

export interface ReadingsOptions {
  keys: Keys;
  /** Where a reading worth an event goes: the key's own subject. */
  appendKeyEvent(keyId: string, envelope: Envelope): Promise<void>;
  gateway: string;
  newId: () => string;
  clock: () => number;
  log: Logger;
}

/**
 * The windows' readings: every answer's rate-limit headers update its key's window, and a
 * reading that moved it is a `RateLimitObserved` event; what other gateways record is
 * learnt the same way. Calls waiting for a key's first reading are let go when it comes.
 */
export class Readings {
  // The call out to take the first reading of a key, by key id.
  private readonly probes = new Map<string, Call>();
  // Calls waiting for the first reading of a key another call went out to take.
  private readonly firstReadings = new Map<string, { promise: Promise<void>; resolve: () => void }>();
  // When each key's provider was last said to send figures past their bounds (one warning
  // a minute per key, however many answers carry them).
  private readonly warnedAt = new Map<string, number>();

  constructor(private readonly options: ReadingsOptions) {}

  /** The call out to take the first reading of the key, if any. */
  proberOf(keyId: string): Call | undefined {
    return this.probes.get(keyId);
  }

  /** The call goes out to take the key's first reading. */
  claimProbe(keyId: string, call: Call): void {
    this.probes.set(keyId, call);
  }

  /** Settles when the key's first reading comes (or it said it tells nothing, or its probe ended unread). */
  firstReading(keyId: string): Promise<void> {
    let waiting = this.firstReadings.get(keyId);
    if (waiting === undefined) {
      let resolve: () => void = () => undefined;
      const promise = new Promise<void>((done) => {
        resolve = done;
      });
      waiting = { promise, resolve };
      this.firstReadings.set(keyId, waiting);
    }
    return waiting.promise;
  }

  /** The key was read (or said it tells nothing, or its probe ended unread): who waited for it goes on. */
  came(keyId: string): void {
    this.probes.delete(keyId);
    const waiting = this.firstReadings.get(keyId);
    if (waiting === undefined) return;
    this.firstReadings.delete(keyId);
    waiting.resolve();
  }

  /** A probe that ended before its key was read (refused, its client gone) lets its waiters go. */
  callEnded(call: Call): void {
    for (const [keyId, probe] of this.probes) if (probe === call) this.came(keyId);
  }

  /** Every answer's rate-limit headers update its key's window; a reading that moved it is an event. */
  answered(key: Key, answer: UpstreamAnswer): void {
    const { clock, log, gateway } = this.options;
    const nowMs = clock();
    const reading = refusalOnly(
      readRateLimits(answer.headers, key.names, nowMs, this.notBelieved(key, nowMs)),
      answer.statusCode,
    );
    if (reading === undefined) {
      key.window.noteUnread();
      this.came(key.keyId);
      return;
    }
    const worth = key.window.observe(
      reading,
      answer.sentAtMs,
      nowMs,
      key.names.resetFormat === "timestamp" ? SECOND_RESOLUTION_MS : 1,
    );
    this.came(key.keyId);
    if (!worth) return;
    const envelope = makeEnvelope({
      id: this.options.newId(),
      runId: "",
      sequence: 0,
      timestampMs: nowMs,
      tag: "",
      payload: {
        $case: "rateLimitObserved",
        value: observed(key, reading, gateway, answer.sentAtMs),
      },
    });
    this.options
      .appendKeyEvent(key.keyId, envelope)
      .catch((error: unknown) =>
        log.warn({ err: error, keyId: key.keyId }, "could not record a rate-limit reading"),
      );
  }

  /** A reading another gateway recorded: the window it read becomes this gateway's too. */
  learn(envelope: StoredEnvelope): void {
    if (!isKnown(envelope) || envelope.payload.$case !== "rateLimitObserved") return;
    const observed = envelope.payload.value;
    if (observed.gateway === this.options.gateway || !/^[0-9a-f]{16}$/.test(observed.keyId)) return;
    const window = this.options.keys.windows.of(observed.keyId, observed.upstream);
    window.learn(
      readingOfRecorded(observed, envelope.timestampMs),
      asOfOfRecorded(Number(observed.asOfMs), envelope.timestampMs, this.options.clock()),
      envelope.timestampMs,
      shapesOfRecorded(observed),
    );
    this.came(observed.keyId);
  }

  private notBelieved(key: Key, nowMs: number) {
    return (problem: string): void => {
      if (nowMs - (this.warnedAt.get(key.keyId) ?? Number.NEGATIVE_INFINITY) < PROBLEM_EVERY_MS) return;
      if (this.warnedAt.size >= WARNED_KEPT) this.warnedAt.clear();
      this.warnedAt.set(key.keyId, nowMs);
      this.options.log.warn(
        { keyId: key.keyId, upstream: key.window.upstream, problem },
        "the provider's rate-limit headers past their bounds were not believed (taken as not reported)",
      );
    };
  }
}

function observed(key: Key, reading: RateLimitReading, gateway: string, asOfMs: number): RateLimitObserved {
  const window = (dimension: Dimension): RateWindow => {
    const read = reading[dimension];
    const shape = key.window.shapeOf(dimension);
    return read === undefined
      ? { reported: false, limit: 0, remaining: 0, resetAtMs: 0, shape: "", shapeReadings: 0 }
      : {
          reported: true,
          limit: Math.round(read.limit ?? 0),
          remaining: Math.round(read.remaining),
          resetAtMs: Math.round(read.resetAtMs ?? 0),
          // Only what this gateway's own readings showed: never a shape it was told or given.
          shape: shape?.learnt ?? "unknown",
          shapeReadings: Math.min(shape?.readings ?? 0, 0xffff_ffff),
        };
  };
  return {
    keyId: key.keyId,
    upstream: key.window.upstream,
    requests: window("requests"),
    tokens: window("tokens"),
    inputTokens: window("inputTokens"),
    outputTokens: window("outputTokens"),
    retryAfterMs: Math.round(reading.retryAfterMs ?? 0),
    gateway,
    asOfMs: Math.round(asOfMs),
  };
}
