import type { WindowReading } from "./headers.js";

/**
 * One dimension of a provider key's window as last read, refilled as time passes: what
 * the provider said was left, growing evenly to the whole window by its reset (providers
 * refill continuously), and the whole window once the reset has passed.
 */
export class WindowState {
  private constructor(
    private readonly reading: WindowReading,
    private readonly readAtMs: number,
  ) {}

  static from(reading: WindowReading, readAtMs: number): WindowState {
    return new WindowState(reading, readAtMs);
  }

  get limit(): number | undefined {
    return this.reading.limit;
  }

  get resetAtMs(): number | undefined {
    return this.reading.resetAtMs;
  }

  /** What is available at `nowMs`, as far as the last reading says. */
  available(nowMs: number): number {
    const { limit, remaining, resetAtMs } = this.reading;
    if (limit === undefined || resetAtMs === undefined) return remaining;
    if (nowMs >= resetAtMs) return limit;
    const span = resetAtMs - this.readAtMs;
    if (span <= 0 || nowMs <= this.readAtMs) return remaining;
    return Math.min(limit, remaining + ((limit - remaining) * (nowMs - this.readAtMs)) / span);
  }

  /**
   * When `amount`, more than the whole window, will have refilled since the reading: what
   * calls made after the reading take comes out of the window as it refills, so it is whole
   * again only once their part has refilled too. At the rate the reading shows, or, when it
   * shows none, the whole window in `fullMs`; undefined when the provider gives no limit.
   */
  refilledAt(amount: number, nowMs: number, fullMs: number): number | undefined {
    const { limit, remaining, resetAtMs } = this.reading;
    if (limit === undefined || limit <= 0) return undefined;
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
    const span = resetAtMs - this.readAtMs;
    if (span <= 0) return resetAtMs;
    return Math.min(resetAtMs, this.readAtMs + ((amount - remaining) / (limit - remaining)) * span);
  }
}
