import {
  DiscardPolicy,
  JetStreamApiCodes,
  type JetStreamManager,
  RetentionPolicy,
  StorageType,
  type StreamConfig,
} from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { BusConfigurationError } from "./errors.js";
import { isApiError, type Link } from "./link.js";
import type { StreamSettings, StreamState } from "./model.js";

// JetStream API error: a stream with that name exists (with another configuration).
const STREAM_NAME_IN_USE = 10058;
const DUPLICATE_WINDOW_MS = 2 * 60_000;

/** The event stream itself: made or brought to this version's configuration, and looked at. */
export class Provisioning {
  constructor(private readonly link: Link) {}

  /**
   * Creates the event stream, or brings an existing one to the configuration this version
   * wants. Safe to call from every service at every start: a stream as wanted is only
   * looked at, and only a credential allowed to (an admin's) can make or change it.
   */
  async provision(): Promise<void> {
    const { jsm, stream, subjects } = this.link;
    const want: Partial<StreamConfig> & { name: string } = {
      name: stream,
      description: "Holdfast run events: the log every projection is derived from",
      subjects: [subjects.allRuns, subjects.allKeys, subjects.allAgents],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.Old,
      num_replicas: this.link.options.replicas ?? 1,
      max_age: 0,
      duplicate_window: nanos(DUPLICATE_WINDOW_MS),
      allow_direct: true,
      // The log is append-only: no message is deleted or purged by a client.
      deny_delete: true,
      deny_purge: true,
      // Each run event, once stored, is also published on a subject of its own: a process
      // serving a run another process writes too hears that run's events at once (`tail`)
      // without a consumer, and without hearing every other run's.
      republish: { src: subjects.allRuns, dest: subjects.republishedRuns },
    };
    const existing = await jsm.streams.info(stream).catch((error: unknown) => {
      if (isApiError(error, JetStreamApiCodes.StreamNotFound)) return undefined;
      throw error;
    });
    if (existing === undefined) {
      try {
        await jsm.streams.add(want);
        return;
      } catch (error) {
        // Another service created it between our look and our add: fall through to update.
        if (!isApiError(error, STREAM_NAME_IN_USE))
          throw this.link.unprovisioned(`the stream ${stream}`, error);
      }
    }
    const current = existing?.config ?? (await jsm.streams.info(stream)).config;
    if (current.storage !== want.storage) {
      throw new BusConfigurationError(
        `stream ${stream} uses ${current.storage} storage; Holdfast needs file storage`,
      );
    }
    const drift =
      current.num_replicas !== want.num_replicas ||
      current.allow_direct !== true ||
      current.deny_delete !== true ||
      current.deny_purge !== true ||
      current.republish?.src !== want.republish?.src ||
      current.republish?.dest !== want.republish?.dest ||
      !current.subjects?.includes(subjects.allRuns) ||
      !current.subjects?.includes(subjects.allKeys) ||
      !current.subjects?.includes(subjects.allAgents);
    if (drift) {
      await this.updateStream({
        ...current,
        subjects: [
          ...new Set([...(current.subjects ?? []), subjects.allRuns, subjects.allKeys, subjects.allAgents]),
        ],
        num_replicas: want.num_replicas,
        allow_direct: true,
        deny_delete: true,
        deny_purge: true,
        republish: want.republish,
      });
    }
  }

  private async updateStream(config: Parameters<JetStreamManager["streams"]["update"]>[1]): Promise<void> {
    try {
      await this.link.jsm.streams.update(this.link.stream, config);
    } catch (error) {
      throw this.link.unprovisioned(`the stream ${this.link.stream} as this version wants it`, error);
    }
  }

  /** The event stream's configuration as JetStream holds it. */
  async streamSettings(): Promise<StreamSettings> {
    const config = (await this.link.jsm.streams.info(this.link.stream)).config;
    return {
      subjects: config.subjects ?? [],
      storage: config.storage === StorageType.File ? "file" : "memory",
      replicas: config.num_replicas,
      allowDirect: config.allow_direct === true,
      denyDelete: config.deny_delete === true,
      denyPurge: config.deny_purge === true,
      republish:
        config.republish === undefined
          ? undefined
          : { src: config.republish.src, dest: config.republish.dest },
      duplicateWindowMs: (config.duplicate_window ?? 0) / 1e6,
    };
  }

  /** The stream's first and last sequence, size and creation time. */
  async streamState(): Promise<StreamState> {
    const info = await this.link.jsm.streams.info(this.link.stream);
    return {
      firstSeq: info.state.first_seq,
      lastSeq: info.state.last_seq,
      messages: info.state.messages,
      created: info.created,
    };
  }

  /** How many messages each subject matching `filter` holds. */
  async subjectCounts(filter: string): Promise<Map<string, number>> {
    const info = await this.link.jsm.streams.info(this.link.stream, { subjects_filter: filter });
    return new Map(Object.entries(info.state.subjects ?? {}));
  }
}
