import { setTimeout as sleep } from "node:timers/promises";
import type { EventType } from "@holdfast/events";
import { AckPolicy, type ConsumerMessages, DeliverPolicy } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import type { Consumers } from "./consumers.js";
import type { Link } from "./link.js";
import type { PulledMessage, Puller, Watch, WatchedEvent } from "./model.js";
import type { Provisioning } from "./provision.js";
import { READ_BATCH } from "./reader.js";

/** How long a watch waits between reads of the stream, unless told otherwise. */
const DEFAULT_WATCH_LINGER_MS = 100;
/** The longest a watch waits between reads while the stream is quiet, unless told otherwise. */
const DEFAULT_WATCH_IDLE_MS = 250;
/** The longest a watch waits before trying a failed read again. */
const WATCH_RETRY_MAX_MS = 2_000;
/** A watch's consumer nobody pulls from for this long is removed by the server. */
const WATCH_INACTIVE_MS = 30_000;
/** Events a follow keeps requested ahead of its handler. */
const FOLLOW_BUFFER = 256;
/** A follow's pull requests live this long; the server sends heartbeats at half of it. */
const FOLLOW_EXPIRES_MS = 4_000;
/** A follow that has heard nothing (no event, heartbeat or expired pull) for this long starts a new consumer. */
const FOLLOW_SILENCE_MS = 5_000;

/** Live views of the log: the batched watch, the pushed follow, one run's tail. */
export class Watches {
  constructor(
    private readonly link: Link,
    private readonly provisioning: Provisioning,
    private readonly consumers: Consumers,
  ) {}

  /** See Bus.watch. */
  async watch(
    handler: (event: WatchedEvent) => void,
    options: { afterSeq?: number; keys?: boolean; lingerMs?: number; idleMs?: number } = {},
  ): Promise<Watch> {
    const { jsm, stream, subjects } = this.link;
    // Runs' events, or (keys) the provider keys' own events, whose run id is "".
    const keys = options.keys === true;
    const filter = keys ? subjects.allKeys : subjects.allRuns;
    const lingerMs = options.lingerMs ?? this.link.options.watchLingerMs ?? DEFAULT_WATCH_LINGER_MS;
    const idleMs = options.idleMs ?? this.link.options.watchIdleMs ?? DEFAULT_WATCH_IDLE_MS;
    let waitMs = lingerMs;
    let after = options.afterSeq ?? (await this.provisioning.streamState()).lastSeq;
    let stopped = false;
    let wake: (() => void) | undefined;
    const pause = (ms: number) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          wake = undefined;
          resolve();
        }, ms);
        wake = () => {
          clearTimeout(timer);
          wake = undefined;
          resolve();
        };
      });
    const open = async (): Promise<{ name: string; puller: Puller }> => {
      const created = await jsm.consumers.add(stream, {
        filter_subject: filter,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: after + 1,
        ack_policy: AckPolicy.None,
        mem_storage: true,
        num_replicas: 1,
        // Removed by the server once nobody pulls from it (the process died or stalled).
        inactive_threshold: nanos(WATCH_INACTIVE_MS),
      });
      return { name: created.name, puller: this.consumers.puller(created.name) };
    };
    let current = await open();
    const loop = (async () => {
      for (let failures = 0; !stopped; ) {
        let messages: PulledMessage[];
        try {
          if (failures > 0) current = await open();
          messages = await current.puller.pull(READ_BATCH);
          failures = 0;
        } catch {
          current.puller.close();
          failures += 1;
          await pause(Math.min(lingerMs * 2 ** failures, WATCH_RETRY_MAX_MS));
          continue;
        }
        for (const message of messages) {
          if (stopped) return;
          if (message.seq <= after) continue;
          after = message.seq;
          handler(watchedEvent(subjects, message, keys));
        }
        // A quiet log is looked at less and less often (each look wakes this process and
        // nats-server), up to `idleMs`; the first event brings the pace back.
        if (messages.length > 0) waitMs = lingerMs;
        else waitMs = Math.min(waitMs * 2, Math.max(lingerMs, idleMs));
        if (messages.length < READ_BATCH && !stopped) await pause(waitMs);
      }
    })();
    return {
      stop: async () => {
        stopped = true;
        wake?.();
        await loop;
        current.puller.close();
        await jsm.consumers.delete(stream, current.name).catch(() => undefined);
      },
    };
  }

  /** See Bus.follow. */
  async follow(
    types: readonly EventType[],
    handler: (event: WatchedEvent) => void,
    options: { afterSeq?: number; keys?: boolean; agents?: boolean } = {},
  ): Promise<Watch> {
    const { js, stream, subjects } = this.link;
    // Runs' events, or (keys, agents) the provider keys' or agents' own events, whose run id is "".
    const keys = options.keys === true || options.agents === true;
    const filters = types.map((type) =>
      options.keys === true
        ? subjects.ofKeyType(type)
        : options.agents === true
          ? subjects.ofAgentType(type)
          : subjects.ofType(type),
    );
    let after = options.afterSeq ?? (await this.provisioning.streamState()).lastSeq;
    let stopped = false;
    let generation = 0;
    let aliveMs = Date.now();
    const open = async (): Promise<ConsumerMessages> => {
      const mine = ++generation;
      const consumer = await js.consumers.get(stream, {
        filter_subjects: filters,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: after + 1,
      });
      const messages = await consumer.consume({
        max_messages: FOLLOW_BUFFER,
        expires: FOLLOW_EXPIRES_MS,
        callback: (message) => {
          if (mine !== generation || message.seq <= after) return;
          aliveMs = Date.now();
          after = message.seq;
          handler(watchedEvent(subjects, message, keys));
        },
      });
      // Heartbeats and expired pulls are signs of life too ("next" is only our own pull).
      void (async () => {
        for await (const status of messages.status()) {
          if (mine === generation && status.type !== "next") aliveMs = Date.now();
        }
      })().catch(() => undefined);
      return messages;
    };
    let current = await open();
    aliveMs = Date.now();
    let reopening = false;
    const reopen = async () => {
      void current.close().catch(() => undefined);
      for (let delay = 250; !stopped; delay = Math.min(delay * 2, FOLLOW_EXPIRES_MS)) {
        try {
          current = await open();
          aliveMs = Date.now();
          // Stopped while it was being opened: stop() closed the one before.
          if (stopped) await current.close();
          return;
        } catch {
          await sleep(delay);
        }
      }
    };
    const watchdog = setInterval(() => {
      if (stopped || reopening || Date.now() - aliveMs < FOLLOW_SILENCE_MS) return;
      reopening = true;
      void reopen().finally(() => {
        reopening = false;
      });
    }, FOLLOW_EXPIRES_MS / 4);
    watchdog.unref();
    return {
      stop: async () => {
        stopped = true;
        clearInterval(watchdog);
        await current.close();
      },
    };
  }

  /** See Bus.tail. */
  tail(runId: string, handler: (event: WatchedEvent) => void): () => void {
    const { stream, subjects } = this.link;
    // What the stream republished of this run, and nothing else: a credential of the same
    // account can have JetStream answer a direct get (of its own bucket, of another run) on
    // this subject, and that answer names the stream and subject it came from.
    const ofRun = subjects.run(runId).slice(0, -1);
    const subscription = this.link.nc.subscribe(subjects.republishedRun(runId), {
      callback: (error, msg) => {
        if (error !== null) return;
        // The stream adds these headers to those its publisher gave: a message carrying its
        // own Nats-Subject or Nats-Sequence (a forger's, naming another type) has two of one.
        const only = (name: string) => {
          const values = msg.headers?.values(name) ?? [];
          return values.length === 1 ? values[0]! : undefined;
        };
        if (only("Nats-Stream") !== stream) return;
        const subject = only("Nats-Subject") ?? "";
        const sequence = Number(only("Nats-Sequence") || Number.NaN);
        if (!subject.startsWith(ofRun) || subject.indexOf(".", ofRun.length) !== -1) return;
        if (!Number.isSafeInteger(sequence)) return;
        // The subject it came on is the server's, made from the stored one: the same type.
        if (msg.subject.slice(msg.subject.lastIndexOf(".")) !== subject.slice(subject.lastIndexOf(".")))
          return;
        handler({
          runId,
          type: subject.slice(subject.lastIndexOf(".") + 1),
          streamSequence: sequence,
          subject,
          data: msg.data,
        });
      },
    });
    return () => subscription.unsubscribe();
  }
}

/**
 * A stored message as a watch hands it on: its type is its subject's last token, its run
 * the subject's (none, "", for a provider key's or an agent's event).
 */
function watchedEvent(
  subjects: Link["subjects"],
  message: { seq: number; subject: string; data: Uint8Array },
  keys: boolean,
): WatchedEvent {
  const { subject } = message;
  return {
    runId: keys ? "" : subjects.runIdOf(subject),
    type: subject.slice(subject.lastIndexOf(".") + 1),
    streamSequence: message.seq,
    subject,
    data: message.data,
  };
}
