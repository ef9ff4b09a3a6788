/** Which bound kept a call from parking: its run's, this gateway's, or the bodies' it holds. */
export type ParkingBound = "per_run" | "per_gateway" | "bytes";

export const PARKING_BOUNDS: readonly ParkingBound[] = ["per_run", "per_gateway", "bytes"];

/** Released calls that go on in one turn of the event loop (ParkingLot.turn). */
const GOING_PER_TURN = 32;

/**
 * The calls this gateway keeps parked, per run and in all, within `hold.max_parked_per_run`
 * and `hold.max_parked`, and the bodies they hold within `hold.max_parked_bytes`. A parked
 * call holds a connection (a file descriptor) and its request's body for as long as its run
 * is held, which may be hours: without a bound one client could park calls until the
 * process runs out of either. A call past a bound is refused at once, and only counted here.
 */
export class ParkingLot {
  private readonly byRun = new Map<string, number>();
  private total = 0;
  private bytes = 0;
  readonly #refused: Record<ParkingBound, number> = { per_run: 0, per_gateway: 0, bytes: 0 };

  /** Released calls waiting for their turn to go on (`turn`), and whether a turn is due. */
  private readonly going: (() => void)[] = [];
  private turnDue = false;

  constructor(
    readonly bounds: { readonly perRun: number; readonly perGateway: number; readonly bytes: number },
  ) {}

  /**
   * Resolves when a call that left its place (released) may go on: at once unless many were
   * released together, then GOING_PER_TURN at a time, each batch in a turn of the event loop
   * of its own. A resume of the fleet releases thousands of calls within moments; going on
   * all at once, their forwarding would hold the event loop for seconds, during which the
   * rest of the resumes (and health checks, and other runs' calls) would not be read. So
   * every parked call is released as soon as its resume arrives, and they go on in turns.
   */
  turn(): Promise<void> {
    return new Promise((resolve) => {
      this.going.push(resolve);
      if (this.turnDue) return;
      this.turnDue = true;
      setImmediate(this.nextTurn);
    });
  }

  private readonly nextTurn = () => {
    for (const go of this.going.splice(0, GOING_PER_TURN)) go();
    if (this.going.length > 0) setImmediate(this.nextTurn);
    else this.turnDue = false;
  };

  /**
   * Takes a place for a call of `runId` holding a body of `bytes`, or says which bound is
   * reached (and counts it).
   */
  take(runId: string, bytes: number): ParkingBound | undefined {
    const ofRun = this.byRun.get(runId) ?? 0;
    const full: ParkingBound | undefined =
      this.total >= this.bounds.perGateway
        ? "per_gateway"
        : ofRun >= this.bounds.perRun
          ? "per_run"
          : this.bytes + bytes > this.bounds.bytes
            ? "bytes"
            : undefined;
    if (full !== undefined) {
      this.#refused[full] += 1;
      return full;
    }
    this.byRun.set(runId, ofRun + 1);
    this.total += 1;
    this.bytes += bytes;
    return undefined;
  }

  /** Gives back a place `take` gave (with the same `bytes`). */
  leave(runId: string, bytes: number): void {
    const ofRun = this.byRun.get(runId) ?? 0;
    if (ofRun <= 0) return;
    if (ofRun === 1) this.byRun.delete(runId);
    else this.byRun.set(runId, ofRun - 1);
    this.total -= 1;
    this.bytes -= bytes;
  }

  /** What the bound that refused a call is set to. */
  limitOf(bound: ParkingBound): number {
    return bound === "per_run"
      ? this.bounds.perRun
      : bound === "per_gateway"
        ? this.bounds.perGateway
        : this.bounds.bytes;
  }

  /** Calls parked now. */
  get parked(): number {
    return this.total;
  }

  /** The bytes of the bodies parked calls hold now. */
  get parkedBytes(): number {
    return this.bytes;
  }

  /** Calls refused since this process started, by the bound that refused them. */
  get refused(): Readonly<Record<ParkingBound, number>> {
    return { ...this.#refused };
  }
}
