import { JetStreamApiCodes, JetStreamApiError, StorageType } from "@nats-io/jetstream";
import { type KV, type KvEntry, Kvm, type KvWatchEntry } from "@nats-io/kv";
import { BUCKET_NAMES, type BucketLimits, type BucketName, bucketTtlMs } from "./buckets.js";
import { type BusError, BusRejectedError, BusUnavailableError, KeyChangedError } from "./errors.js";
import { isApiError, isPermissionError, type Link, publishFailed } from "./link.js";
import type { KeyChange, KeyEntry, KeyValue, KeyWatch } from "./model.js";

/** Holdfast's key-value buckets beside the log: opened, made, and written on the hot path. */
export class Buckets {
  constructor(private readonly link: Link) {}

  /** See Bus.keyValue. */
  async keyValue(bucket: BucketName): Promise<KeyValue> {
    const name = this.bucketName(bucket);
    const info = await this.link.jsm.streams.info(`KV_${name}`).catch((error: unknown) => {
      if (isApiError(error, JetStreamApiCodes.StreamNotFound)) return undefined;
      throw error;
    });
    if (info === undefined) {
      try {
        return new NatsKeyValue(name, await this.createBucket(bucket));
      } catch (error) {
        throw this.link.unprovisioned(`the bucket ${name}`, error);
      }
    }
    // Opened as it is (no create: that would be a reconfiguration), reading it the way it allows.
    return new NatsKeyValue(
      name,
      await new Kvm(this.link.js).open(name, { allow_direct: info.config.allow_direct === true }),
    );
  }

  /** See Bus.provisionBuckets. */
  async provisionBuckets(limits: BucketLimits = {}): Promise<void> {
    for (const bucket of BUCKET_NAMES) {
      await this.createBucket(bucket, limits);
      const maxBytes = maxBytesOf(bucket, limits);
      if (maxBytes === undefined) continue;
      // An existing bucket is brought to the bound asked for (making one only opens it).
      const name = `KV_${this.bucketName(bucket)}`;
      const { config } = await this.link.jsm.streams.info(name);
      if (config.max_bytes !== maxBytes)
        await this.link.jsm.streams.update(name, { ...config, max_bytes: maxBytes });
    }
  }

  private createBucket(bucket: BucketName, limits: BucketLimits = {}): Promise<KV> {
    const ttl = bucketTtlMs(bucket);
    const maxBytes = maxBytesOf(bucket, limits);
    return new Kvm(this.link.js).create(this.bucketName(bucket), {
      history: 1,
      replicas: this.link.options.replicas ?? 1,
      storage: StorageType.File,
      ...(ttl === undefined ? {} : { ttl }),
      ...(maxBytes === undefined ? {} : { max_bytes: maxBytes }),
    });
  }

  /** See Bus.bucketSize. */
  async size(bucket: BucketName): Promise<{ values: number; bytes: number }> {
    const info = await this.link.jsm.streams.info(`KV_${this.bucketName(bucket)}`);
    return { values: info.state.messages, bytes: info.state.bytes };
  }

  /** See Bus.putValue. */
  async putValue(bucket: BucketName, key: string, value: string, deferred = false): Promise<void> {
    const subject = `$KV.${this.bucketName(bucket)}.${key}`;
    const data = Buffer.from(value);
    const ack = await (deferred
      ? this.link.publisher.publishDeferred(subject, data)
      : this.link.publisher.publish(subject, data));
    if (!ack.ok) throw publishFailed(ack, `put to ${this.bucketName(bucket)}`);
  }

  private bucketName(bucket: BucketName): string {
    return `${this.link.subjects.prefix.toUpperCase()}_${bucket}`;
  }
}

/**
 * A bucket as Holdfast uses it, over the NATS KV client: values are strings, a deleted key
 * reads as none, and the client's errors become the bus's (a compare-and-set that lost is
 * a KeyChangedError).
 */
class NatsKeyValue implements KeyValue {
  constructor(
    private readonly name: string,
    private readonly kv: KV,
  ) {}

  async get(key: string): Promise<KeyEntry | undefined> {
    let entry: KvEntry | null;
    try {
      entry = await this.kv.get(key);
    } catch (error) {
      throw this.failed(`reading ${key}`, error);
    }
    if (entry === null || entry.operation !== "PUT") return undefined;
    return {
      key: entry.key,
      value: entry.string(),
      revision: entry.revision,
      storedMs: entry.created.getTime(),
    };
  }

  async put(key: string, value: string): Promise<number> {
    try {
      return await this.kv.put(key, value);
    } catch (error) {
      throw this.failed(`putting ${key}`, error);
    }
  }

  async create(key: string, value: string): Promise<number> {
    try {
      return await this.kv.create(key, value);
    } catch (error) {
      throw this.failed(`creating ${key}`, error);
    }
  }

  async update(key: string, value: string, revision: number): Promise<number> {
    try {
      return await this.kv.update(key, value, revision);
    } catch (error) {
      throw this.failed(`updating ${key} at revision ${revision}`, error);
    }
  }

  async delete(key: string, options: { revision?: number } = {}): Promise<void> {
    try {
      await this.kv.delete(
        key,
        options.revision === undefined ? undefined : { previousSeq: options.revision },
      );
    } catch (error) {
      throw this.failed(`deleting ${key}`, error);
    }
  }

  async keys(): Promise<string[]> {
    const keys: string[] = [];
    try {
      for await (const key of await this.kv.keys()) keys.push(key);
    } catch (error) {
      throw this.failed("listing the keys", error);
    }
    return keys;
  }

  async watch(options: { updatesOnly?: boolean } = {}): Promise<KeyWatch> {
    let watch: Awaited<ReturnType<KV["watch"]>>;
    try {
      watch = await this.kv.watch(options.updatesOnly === true ? { include: "updates" } : {});
    } catch (error) {
      throw this.failed("watching", error);
    }
    return {
      stop: () => watch.stop(),
      async *[Symbol.asyncIterator]() {
        for await (const entry of watch) yield changeOf(entry);
      },
    };
  }

  /** A failure of the client as the bus's error: a lost compare-and-set, a refusal, or NATS away. */
  private failed(what: string, error: unknown): BusError {
    const message = `${what} of bucket ${this.name}: ${error instanceof Error ? error.message : String(error)}`;
    if (
      error instanceof JetStreamApiError &&
      (error.code === JetStreamApiCodes.StreamWrongLastSequence ||
        error.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
    ) {
      return new KeyChangedError(message, { cause: error });
    }
    if (isPermissionError(error)) return new BusRejectedError(message, { cause: error });
    return new BusUnavailableError(message, { cause: error });
  }
}

function changeOf(entry: KvWatchEntry): KeyChange {
  return {
    key: entry.key,
    value: entry.operation === "PUT" ? entry.string() : undefined,
    revision: entry.revision,
    storedMs: entry.created.getTime(),
    update: entry.isUpdate,
    // The watch's last entry of those it started with (an empty bucket's first is a change).
    caughtUp: entry.isUpdate || entry.delta === 0,
  };
}

function maxBytesOf(bucket: BucketName, limits: BucketLimits): number | undefined {
  if (bucket !== "SNAPSHOT_PARTS" && bucket !== "SNAPSHOT_STEPS") return undefined;
  return limits.snapshotMaxBytes;
}
