import type { Bus, Watch, WatchedEvent } from "@holdfast/bus";
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
  /**
   * Also hand on every other event, taken from the log in batches a few times a second
   * (the runs' calls made by other processes): a cache kept current this way rarely meets
   * a conflict. Without it, another writer's events are read when an append conflicts.
   */
  everything?: boolean;
}

/**
 * The event log as a process follows it, handed to each sink (the runs' ledger, the
 * fleet's, indexes): urgent events the moment they are stored, and (`everything`) the rest
 * in batches. An event may reach a sink twice (pushed, then in its batch): sinks skip
 * what they have.
 */
export class LogFollower {
  private readonly watches: Watch[] = [];

  constructor(
    private readonly bus: Bus,
    private readonly sinks: readonly LogSink[],
    private readonly options: FollowOptions = {},
  ) {}

  async start(): Promise<void> {
    const handler = (event: WatchedEvent) => {
      for (const sink of this.sinks) sink.heard(event);
    };
    // Both from the same place, so that nothing falls between them.
    const afterSeq = (await this.bus.streamState()).lastSeq;
    this.watches.push(await this.bus.follow(this.options.urgent ?? URGENT_TYPES, handler, { afterSeq }));
    if (this.options.everything === true) this.watches.push(await this.bus.watch(handler, { afterSeq }));
  }

  async stop(): Promise<void> {
    await Promise.all(this.watches.splice(0).map((watch) => watch.stop()));
  }
}
