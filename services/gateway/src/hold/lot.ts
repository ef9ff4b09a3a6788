/** Which bound kept a call from parking: its run's, or this gateway's. */
export type ParkingBound = "per_run" | "per_gateway";

export const PARKING_BOUNDS: readonly ParkingBound[] = ["per_run", "per_gateway"];

/**
 * The calls this gateway keeps parked, per run and in all, within `hold.max_parked_per_run`
 * and `hold.max_parked`. A parked call holds a connection (a file descriptor) for as long
 * as its run is held, which may be hours: without a bound one client could park calls
 * until the process runs out of them. A call past a bound is refused at once, and only
 * counted here.
 */
export class ParkingLot {
  private readonly byRun = new Map<string, number>();
  private total = 0;
  readonly #refused: Record<ParkingBound, number> = { per_run: 0, per_gateway: 0 };

  constructor(readonly bounds: { readonly perRun: number; readonly perGateway: number }) {}

  /** Takes a place for a call of `runId`, or says which bound is reached (and counts it). */
  take(runId: string): ParkingBound | undefined {
    const ofRun = this.byRun.get(runId) ?? 0;
    const full: ParkingBound | undefined =
      this.total >= this.bounds.perGateway
        ? "per_gateway"
        : ofRun >= this.bounds.perRun
          ? "per_run"
          : undefined;
    if (full !== undefined) {
      this.#refused[full] += 1;
      return full;
    }
    this.byRun.set(runId, ofRun + 1);
    this.total += 1;
    return undefined;
  }

  /** Gives back a place `take` gave. */
  leave(runId: string): void {
    const ofRun = this.byRun.get(runId) ?? 0;
    if (ofRun <= 0) return;
    if (ofRun === 1) this.byRun.delete(runId);
    else this.byRun.set(runId, ofRun - 1);
    this.total -= 1;
  }

  /** Calls parked now. */
  get parked(): number {
    return this.total;
  }

  /** Calls refused since this process started, by the bound that refused them. */
  get refused(): Readonly<Record<ParkingBound, number>> {
    return { ...this.#refused };
  }
}
