import type { Bus, Watch, WatchedEvent } from "@holdfast/bus";

/** Something that follows the event log: folds what it hears, catches up after a gap. */
export interface LogSink {
  heard(event: WatchedEvent): void;
  gap(): void;
}

/**
 * One watch on the event stream for a whole process, handing every event to each sink
 * (the runs' ledger, the fleet's, indexes): one delivery per event, however many follow.
 */
export class LogFollower {
  private watch: Watch | undefined;

  constructor(
    private readonly bus: Bus,
    private readonly sinks: readonly LogSink[],
  ) {}

  async start(): Promise<void> {
    this.watch = await this.bus.watch((event) => {
      for (const sink of this.sinks) sink.heard(event);
    });
    this.watch.onGap(() => {
      for (const sink of this.sinks) sink.gap();
    });
  }

  async stop(): Promise<void> {
    await this.watch?.stop();
  }
}
