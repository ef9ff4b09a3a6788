/** What a switch turns on: started, it returns how to stop it. */
export type Start = () => Promise<() => Promise<void> | void>;

/** Where a failed start (tried again) or stop is told. */
export type SwitchError = (error: unknown, during: "start" | "stop") => void;

/**
 * Something that runs only while it is wanted (a watch a process needs only while another
 * process writes what it watches): `set(true)` starts it, `set(false)` stops it. Calls may
 * come in any number and order; the last one wins, and a start and a stop never overlap. A
 * start that fails is tried again after `retryMs` for as long as it is still wanted.
 */
export class Switched {
  private want = false;
  private stop: (() => Promise<void> | void) | undefined;
  private turn: Promise<void> = Promise.resolve();
  private retry: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly start: Start,
    private readonly onError: SwitchError,
    private readonly retryMs = 1_000,
  ) {}

  /** Whether it is running now. */
  get on(): boolean {
    return this.stop !== undefined;
  }

  /** Whether it is wanted on (it may still be starting, or waiting to try again). */
  get wanted(): boolean {
    return this.want;
  }

  /** Wants it on or off; resolves once it is as wanted (or, on, once a start has failed). */
  set(on: boolean): Promise<void> {
    if (this.closed) return this.turn;
    this.want = on;
    return this.settle();
  }

  /** Stops it for good. */
  close(): Promise<void> {
    this.closed = true;
    this.want = false;
    clearTimeout(this.retry);
    return this.settle();
  }

  private settle(): Promise<void> {
    // Never rejects: a turn that failed must not keep the later ones from running.
    this.turn = this.turn.then(() => this.step());
    return this.turn;
  }

  private async step(): Promise<void> {
    if (this.want && this.stop === undefined) {
      try {
        this.stop = await this.start();
      } catch (error) {
        if (this.closed) return;
        this.tell(error, "start");
        clearTimeout(this.retry);
        this.retry = setTimeout(() => {
          if (this.want && !this.closed) void this.settle();
        }, this.retryMs);
        this.retry.unref();
        return;
      }
      // Closed or no longer wanted while it started: stopped in the same turn.
      if (this.want) return;
    }
    if (!this.want && this.stop !== undefined) {
      const stop = this.stop;
      this.stop = undefined;
      try {
        await stop();
      } catch (error) {
        this.tell(error, "stop");
      }
    }
  }

  private tell(error: unknown, during: "start" | "stop"): void {
    try {
      this.onError(error, during);
    } catch {
      // A failing error handler must not stop the switch.
    }
  }
}
