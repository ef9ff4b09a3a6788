/** What a switch turns on: started, it returns how to stop it. */
export type Start = () => Promise<() => Promise<void> | void>;

/**
 * Something that runs only while it is wanted (a watch a process needs only while another
 * process writes what it watches): `set(true)` starts it, `set(false)` stops it. Calls may
 * come in any number and order; the last one wins, and a start and a stop never overlap. A
 * start that fails is tried again after `retryMs` for as long as it is still wanted.
 */
export class Switched {
  private wanted = false;
  private stop: (() => Promise<void> | void) | undefined;
  private turn: Promise<void> = Promise.resolve();
  private retry: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly start: Start,
    private readonly onError: (error: unknown) => void,
    private readonly retryMs = 1_000,
  ) {}

  /** Whether it is running now. */
  get on(): boolean {
    return this.stop !== undefined;
  }

  /** Wants it on or off; resolves once it is as wanted (or, on, once a start has failed). */
  set(on: boolean): Promise<void> {
    if (this.closed) return this.turn;
    this.wanted = on;
    return this.settle();
  }

  /** Stops it for good. */
  close(): Promise<void> {
    this.closed = true;
    this.wanted = false;
    clearTimeout(this.retry);
    return this.settle();
  }

  private settle(): Promise<void> {
    this.turn = this.turn.then(async () => {
      if (this.wanted && this.stop === undefined) {
        try {
          this.stop = await this.start();
        } catch (error) {
          this.onError(error);
          clearTimeout(this.retry);
          this.retry = setTimeout(() => {
            if (this.wanted && !this.closed) void this.settle();
          }, this.retryMs);
          this.retry.unref();
        }
      } else if (!this.wanted && this.stop !== undefined) {
        const stop = this.stop;
        this.stop = undefined;
        try {
          await stop();
        } catch (error) {
          this.onError(error);
        }
      }
    });
    return this.turn;
  }
}
