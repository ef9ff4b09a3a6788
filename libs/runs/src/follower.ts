import { type Bus, type SwitchError, Switched, type Watch, type WatchedEvent } from "@holdfast/bus";
import type { EventType } from "@holdfast/events";
import { CONTROL_TYPES } from "./held.js";

/** Something that follows the event log: folds what it hears (each event once, or again harmlessly). */
export interface LogSink {
  heard(event: WatchedEvent): void;
}

/**
 * Events a process serving runs must act on at once: an operator's hold, resume or stop,
 * a standing rule, a gate's decision. Rare, so each is pushed as it is stored.
 */
export const URGENT_TYPES: readonly EventType[] = [...CONTROL_TYPES, "HoldRuleAdded", "HoldRuleLifted"];

export interface FollowOptions {
  /** Types pushed to the sinks the moment they are stored (default: URGENT_TYPES). */
  urgent?: readonly EventType[];
  /** Where a failure to start (tried again) or stop following everything is told. */
  onError?: SwitchError;
}

/**
 * The event log as a process follows it, handed to each sink (the runs' ledger, the
 * fleet's, indexes): urgent events the moment they are stored, and (`followEverything`)
 * the rest in batches. An event may reach a sink twice (pushed, then in its batch): sinks
 * skip what they have.
 */
export class LogFollower {
  private urgent: Watch | undefined;
  private readonly everything: Switched;

  constructor(
    private readonly bus: Bus,
    private readonly sinks: readonly LogSink[],
    private readonly options: FollowOptions = {},
  ) {
    this.everything = new Switched(
      async () => {
        const watch = await this.bus.watch(this.handler);
        return () => watch.stop();
      },
      (error, during) => this.options.onError?.(error, during),
    );
  }

  private readonly handler = (event: WatchedEvent) => {
    for (const sink of this.sinks) sink.heard(event);
  };

  async start(): Promise<void> {
    this.urgent = await this.bus.follow(this.options.urgent ?? URGENT_TYPES, this.handler, {
      afterSeq: (await this.bus.streamState()).lastSeq,
    });
  }

  /**
   * Starts or stops handing on every other event too, taken from the log in batches a few
   * times a second (the runs' calls made by other processes): a cache kept current this way
   * rarely meets a conflict; without it, another writer's events are read when an append
   * conflicts. It begins at the log's end: a sink whose state fell behind while it was off
   * hears an event out of sequence (or meets a conflict) and reads what it missed.
   */
  followEverything(on: boolean): Promise<void> {
    return this.everything.set(on);
  }

  /** Whether every event is being handed on now. */
  get followingEverything(): boolean {
    return this.everything.on;
  }

  async stop(): Promise<void> {
    const urgent = this.urgent;
    this.urgent = undefined;
    await Promise.all([this.everything.close(), urgent?.stop()]);
  }
}
