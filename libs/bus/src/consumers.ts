import { AckPolicy, type ConsumerConfig, DeliverPolicy, JetStreamApiCodes } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { BusConfigurationError } from "./errors.js";
import { isApiError, type Link } from "./link.js";
import type { DurableSpec, DurableState, Puller } from "./model.js";
import { NatsPuller } from "./puller.js";

/** Durable consumers of the log: made, read in batches, reset, looked at. */
export class Consumers {
  constructor(private readonly link: Link) {}

  /** See Bus.ensureDurable. */
  async ensureDurable(spec: DurableSpec): Promise<void> {
    const { jsm, stream } = this.link;
    const config: Partial<ConsumerConfig> = {
      durable_name: spec.name,
      ack_policy: spec.ackPolicy === "all" ? AckPolicy.All : AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: spec.filterSubject,
      ack_wait: nanos(spec.ackWaitMs),
      max_ack_pending: spec.maxAckPending,
      max_deliver: -1,
    };
    const existing = await jsm.consumers.info(stream, spec.name).catch((error: unknown) => {
      if (isApiError(error, JetStreamApiCodes.ConsumerNotFound)) return undefined;
      throw error;
    });
    if (existing === undefined) {
      await jsm.consumers.add(stream, config);
      return;
    }
    if (existing.config.ack_policy !== config.ack_policy) {
      throw new BusConfigurationError(
        `consumer ${spec.name} acknowledges with policy "${existing.config.ack_policy}", not "${config.ack_policy}"; delete it to let Holdfast recreate it`,
      );
    }
    const c = existing.config;
    if (
      c.filter_subject !== config.filter_subject ||
      c.ack_wait !== config.ack_wait ||
      c.max_ack_pending !== config.max_ack_pending
    ) {
      await jsm.consumers.update(stream, spec.name, {
        filter_subject: config.filter_subject,
        ack_wait: config.ack_wait,
        max_ack_pending: config.max_ack_pending,
      });
    }
  }

  /** See Bus.puller. */
  puller(durable: string): Puller {
    const { nc, stream, options, inbox } = this.link;
    return new NatsPuller(nc, stream, durable, options.appendTimeoutMs ?? 5_000, inbox);
  }

  /** See Bus.resetDurable. */
  async resetDurable(name: string, seq: number): Promise<void> {
    await this.link.jsm.consumers.reset(this.link.stream, name, seq);
  }

  /** See Bus.durableState. */
  async durableState(name: string): Promise<DurableState | undefined> {
    const info = await this.link.jsm.consumers.info(this.link.stream, name).catch((error: unknown) => {
      if (isApiError(error, JetStreamApiCodes.ConsumerNotFound)) return undefined;
      throw error;
    });
    if (info === undefined) return undefined;
    return {
      delivered: info.delivered.stream_seq,
      ackFloor: info.ack_floor.stream_seq,
      pending: info.num_pending,
      ackPending: info.num_ack_pending,
    };
  }
}
