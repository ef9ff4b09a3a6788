import type { DurableCaps } from "@holdfast/proto";

/** Where a run's caps count: one tenant's runs of one agent with one partition key. */
export interface CapKey {
  readonly tenant: string;
  readonly agent: string;
  readonly partitionKey: string;
}

const MINUTE_MS = 60_000;

/**
 * Per-partition-key caps, checked when a run is handed to a worker: at most
 * `concurrency_per_key` running at once, at most `starts_per_minute` first starts in any
 * 60 s. Counted per tenant, agent and partition key, with the caps each run was queued
 * with. A slot is held by a running run and freed the moment it ends or its worker is
 * lost (not by a counter that waits for a timeout). The clock is the caller's.
 */
export class CapBook {
  private readonly running = new Map<string, number>();
  private readonly starts = new Map<string, number[]>();

  /** Whether a run with these caps may start now; when not, the earliest it may (undefined: when a slot frees). */
  check(key: CapKey, caps: DurableCaps | undefined, firstStart: boolean, nowMs: number): CapCheck {
    const id = idOf(key);
    if (caps === undefined) return ALLOWED;
    if (caps.concurrencyPerKey > 0 && (this.running.get(id) ?? 0) >= caps.concurrencyPerKey) {
      return { allowed: false, why: "concurrency", retryAtMs: undefined };
    }
    if (firstStart && caps.startsPerMinute > 0) {
      const recent = this.recentStarts(id, nowMs);
      if (recent.length >= caps.startsPerMinute) {
        return {
          allowed: false,
          why: "start_rate",
          retryAtMs: recent[recent.length - caps.startsPerMinute]! + MINUTE_MS,
        };
      }
    }
    return ALLOWED;
  }

  /** A run started (its slot taken; a first start counted against the start rate). */
  started(key: CapKey, firstStart: boolean, nowMs: number): void {
    const id = idOf(key);
    this.running.set(id, (this.running.get(id) ?? 0) + 1);
    if (firstStart) {
      const list = this.starts.get(id) ?? [];
      list.push(nowMs);
      this.starts.set(id, list);
    }
  }

  /** A run picked to start did not (its lease could not be recorded): its slot is free, and its start never was. */
  unstarted(key: CapKey, firstStart: boolean, atMs: number): void {
    this.stopped(key);
    if (!firstStart) return;
    const list = this.starts.get(idOf(key));
    const at = list?.lastIndexOf(atMs) ?? -1;
    if (list !== undefined && at >= 0) list.splice(at, 1);
  }

  /** A run stopped running (ended, released, its worker lost): its slot is free. */
  stopped(key: CapKey): void {
    const id = idOf(key);
    const left = (this.running.get(id) ?? 0) - 1;
    if (left > 0) this.running.set(id, left);
    else this.running.delete(id);
  }

  runningOf(key: CapKey): number {
    return this.running.get(idOf(key)) ?? 0;
  }

  private recentStarts(id: string, nowMs: number): number[] {
    const list = this.starts.get(id);
    if (list === undefined) return [];
    let first = 0;
    while (first < list.length && list[first]! <= nowMs - MINUTE_MS) first += 1;
    if (first > 0) list.splice(0, first);
    if (list.length === 0) this.starts.delete(id);
    return list;
  }
}

export type CapCheck =
  | { readonly allowed: true }
  | {
      readonly allowed: false;
      readonly why: "concurrency" | "start_rate";
      readonly retryAtMs: number | undefined;
    };

const ALLOWED: CapCheck = Object.freeze({ allowed: true });

function idOf(key: CapKey): string {
  return `${key.tenant}\u0000${key.agent}\u0000${key.partitionKey}`;
}

/**
 * A start-rate cap as written on an agent: "30/min", "1/sec" (a per-minute count: a burst
 * of 60), "2/minute", "10/s". Undefined for "" (no cap); throws for anything else.
 */
export function parseRateLimit(text: string): number | undefined {
  const trimmed = text.trim();
  if (trimmed === "") return undefined;
  const match = /^(\d+)\s*\/\s*(s|sec|second|m|min|minute)$/i.exec(trimmed);
  if (match === null) {
    throw new RangeError(`rate_limit "${text}" is not a rate: write it as "30/min" or "1/sec"`);
  }
  const count = Number(match[1]);
  const perMinute = /^s/i.test(match[2]!) ? count * 60 : count;
  if (perMinute < 1 || perMinute > 1_000_000) {
    throw new RangeError(`rate_limit "${text}" must allow between 1 and 1,000,000 starts a minute`);
  }
  return perMinute;
}
