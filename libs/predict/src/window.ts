import type { WindowReading } from "./headers.js";
import type { WindowShape } from "./shape.js";

/**
 * One dimension of a provider key's window as last read, and what comes back of it as time
 * passes, by the window's shape: a window read as refilling continuously grows evenly from
 * what the provider said was left to the whole window at its reset; any other (fixed, in
 * steps, or not yet known) gives nothing back until the reset, when it is whole. Past the
 * reset, the whole window, whatever the shape.
 */
export class WindowState {
  private constructor(
    private readonly reading: WindowReading,
    private readonly readAtMs: number,
    readonly shape: WindowShape,
    /** How long one window of a shape that comes back whole lasts, when seen; undefined otherwise. */
    private readonly periodMs: number | undefined,
  ) {}

  static from(
    reading: WindowReading,
    readAtMs: number,
    shape: WindowShape = "unknown",
    periodMs?: number,
  ): WindowState {
    return new WindowState(reading, readAtMs, shape, periodMs);
  }

  get limit(): number | undefined {
    return this.reading.limit;
  }

  get resetAtMs(): number | undefined {
    return this.reading.resetAtMs;
  }

  private get refills(): boolean {
    return this.shape === "continuous";
  }

  /** What is available at `nowMs`, as far as the last reading says. */
  available(nowMs: number): number {
    const { limit, remaining, resetAtMs } = this.reading;
    if (limit === undefined || resetAtMs === undefined) return remaining;
    if (nowMs >= resetAtMs) return limit;
    if (!this.refills) return remaining;
    const span = resetAtMs - this.readAtMs;
    if (span <= 0 || nowMs <= this.readAtMs) return remaining;
    return Math.min(limit, remaining + ((limit - remaining) * (nowMs - this.readAtMs)) / span);
  }

  /**
   * When `amount`, more than the whole window, will have refilled since the reading: what
   * calls made after the reading take comes out of the window as it refills, so it is whole
   * again only once their part has refilled too. At the rate the reading shows, or, when it
   * shows none, the whole window in `fullMs`; undefined when the provider gives no limit.
   * A window that comes back whole comes back at its reset, and then once a period for
   * every further window's worth.
   */
  refilledAt(amount: number, nowMs: number, fullMs: number): number | undefined {
    const { limit, remaining, resetAtMs } = this.reading;
    if (limit === undefined || limit <= 0) return undefined;
    if (!this.refills && resetAtMs !== undefined) {
      // Before a period is seen, each further window is foretold as long as the reading had
      // to its reset (at least the rest of a fixed window's period): a forecast, which
      // decides waiting over checkpointing; nothing is counted back before a reading says so.
      const windows = Math.max(0, Math.ceil((amount - remaining) / limit) - 1);
      const periodMs = this.periodMs ?? Math.max(1, resetAtMs - this.readAtMs);
      return Math.max(nowMs, resetAtMs + windows * periodMs);
    }
    const span = resetAtMs === undefined ? 0 : resetAtMs - this.readAtMs;
    const perMs = span > 0 && limit > remaining ? (limit - remaining) / span : limit / fullMs;
    return Math.max(nowMs, this.readAtMs + (amount - remaining) / perMs);
  }

  /** When `amount` will be available, at the earliest (`nowMs` when it already is); undefined if never (more than the window). */
  availableAt(amount: number, nowMs: number): number | undefined {
    const { limit, remaining, resetAtMs } = this.reading;
    if (this.available(nowMs) >= amount) return nowMs;
    if (limit === undefined || resetAtMs === undefined) return undefined;
    if (amount > limit) return undefined;
    if (!this.refills) return resetAtMs;
    const span = resetAtMs - this.readAtMs;
    if (span <= 0) return resetAtMs;
    return Math.min(resetAtMs, this.readAtMs + ((amount - remaining) / (limit - remaining)) * span);
  }
}
