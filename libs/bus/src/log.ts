import { setTimeout as sleep } from "node:timers/promises";
import {
  decodeStored,
  type Envelope,
  type EventType,
  encodeEnvelope,
  type QuarantinedEvent,
  type StoredBytes,
  type Subjects,
} from "@holdfast/events";
import { AckPolicy, DeliverPolicy, JetStreamApiCodes } from "@nats-io/jetstream";
import { headers, type MsgHdrs, nanos } from "@nats-io/transport-node";
import { BusError, BusRejectedError, BusUnavailableError, ConcurrencyError } from "./errors.js";
import { isNotFound, type Link, publishFailed } from "./link.js";
import type { AppendResult, RawMessage, RunHistory, StoredEvent, StoredMessage } from "./model.js";
import type { Provisioning } from "./provision.js";
import { type AsyncPublisher, PERMISSION_DENIED, TOO_LARGE } from "./publisher.js";
import { READ_BATCH, readBatches } from "./reader.js";

/** How often a read retries a replica that has not caught up with what another one named. */
const READ_CATCH_UP_ATTEMPTS = 20;

/**
 * The expected-sequence check failed: 10071 names the subject's actual last sequence; a
 * replicated stream answers 10164, without it, when another append of the subject is
 * still in flight in the stream's raft group.
 */
const WRONG_LAST_SEQUENCE = new Set([JetStreamApiCodes.StreamWrongLastSequence, 10164]);
/**
 * Refusals that say the append may yet succeed as it is: 10158, an append with this
 * message id is itself still in flight (a retry racing its original); 10163, the stream
 * cannot check the expected sequence yet (a new leader catching up).
 */
const SETTLES_LATER = new Set([10158, 10163]);

/** The log: appends (with each run's order checked) and reads of what is stored. */
export class EventLog {
  private readonly subjects: Subjects;
  private readonly publisher: AsyncPublisher;
  private readonly stream: string;

  constructor(
    private readonly link: Link,
    private readonly provisioning: Provisioning,
  ) {
    this.subjects = link.subjects;
    this.publisher = link.publisher;
    this.stream = link.stream;
  }

  /** See Bus.append. */
  async append(
    envelope: Envelope,
    expectedLastStreamSequence: number,
    options?: { defer?: boolean },
  ): Promise<AppendResult> {
    const type = envelope.type as EventType;
    const subject = this.subjects.runEvent(envelope.runId, type);
    const h = eventHeaders(envelope);
    h.set("Nats-Expected-Last-Subject-Sequence", String(expectedLastStreamSequence));
    h.set("Nats-Expected-Last-Subject-Sequence-Subject", this.subjects.run(envelope.runId));
    const data = encodeEnvelope(envelope);
    const ack = await (options?.defer
      ? this.publisher.publishDeferred(subject, data, h)
      : this.publisher.publish(subject, data, h));
    if (ack.ok) return { streamSequence: ack.seq, duplicate: ack.duplicate };
    if (WRONG_LAST_SEQUENCE.has(ack.errCode)) {
      // A retry of an append that already landed fails the sequence check before the
      // dedupe check: recognise our own event and report it as a duplicate.
      const landed = await this.findLanded(subject, envelope.id);
      if (landed !== undefined) return { streamSequence: landed, duplicate: true };
      throw new ConcurrencyError(
        envelope.runId,
        expectedLastStreamSequence,
        wrongLastSequence(ack.description),
      );
    }
    if (
      ack.errCode === PERMISSION_DENIED ||
      ack.errCode === TOO_LARGE ||
      ack.errCode === 0 ||
      SETTLES_LATER.has(ack.errCode)
    ) {
      throw publishFailed(ack, `append to ${this.stream}`);
    }
    throw new BusRejectedError(`JetStream refused the append (${ack.errCode}): ${ack.description}`);
  }

  /** See Bus.appendKeyEvent. */
  async appendKeyEvent(keyId: string, envelope: Envelope): Promise<void> {
    const h = eventHeaders(envelope);
    const ack = await this.publisher.publishDeferred(
      this.subjects.keyEvent(keyId, envelope.type as EventType),
      encodeEnvelope(envelope),
      h,
    );
    if (!ack.ok) throw publishFailed(ack, `append to ${this.stream}`);
  }

  /** See Bus.appendAgentEvent. */
  async appendAgentEvent(agent: string, envelope: Envelope): Promise<number> {
    const h = eventHeaders(envelope);
    const ack = await this.publisher.publish(
      this.subjects.agentEvent(agent, envelope.type as EventType),
      encodeEnvelope(envelope),
      h,
    );
    if (!ack.ok) throw publishFailed(ack, `append to ${this.stream}`);
    return ack.seq;
  }

  private async findLanded(subject: string, eventId: string): Promise<number | undefined> {
    const last = await this.link.jsm.direct
      .getMessage(this.stream, { last_by_subj: subject })
      .catch(() => null);
    if (last && last.header.get("Nats-Msg-Id") === eventId) return last.seq;
    return undefined;
  }

  /** See Bus.readRun. */
  async readRun(runId: string, after = 0): Promise<RunHistory> {
    try {
      return await this.readRunFrom(runId, after);
    } catch (error) {
      if (error instanceof BusError) throw error;
      // NATS's own failures (a request timing out while a cluster fails over, the
      // connection closing) are the log being unavailable: a caller may try again.
      throw new BusUnavailableError(
        `reading run ${JSON.stringify(runId)} failed: ${(error as Error).message}`,
        {
          cause: error,
        },
      );
    }
  }

  private async readRunFrom(runId: string, after: number): Promise<RunHistory> {
    // Not one read over the run's wildcard: for a wildcard, nats-server walks every message
    // of each block from the run's first event on, tokenizing each subject (about 8 ms of
    // server CPU per read on a stream of 70k events, which saturated it at 100 reads/s).
    // Each subject's last sequence comes from the server's subject index, and each subject
    // with something new is read by its literal name, which jumps to its own messages.
    const lasts = new Map<string, number>();
    try {
      const latest = await this.link.jsm.direct.getLastMessagesFor(this.stream, {
        multi_last: [this.subjects.run(runId)],
      });
      for await (const message of latest) lasts.set(message.subject, message.seq);
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
    const parts = await Promise.all(
      [...lasts]
        .filter(([, last]) => last > after)
        .map(([subject, last]) => this.readSubject(subject, after, last)),
    );
    // Each subject read up to its last sequence as the index had it: what was appended
    // meanwhile is left out whole, so the history has no gap.
    const events: StoredEvent[] = [];
    const quarantined: QuarantinedEvent[] = [];
    let lastStreamSequence = after;
    for (const message of parts.flat().sort((a, b) => a.seq - b.seq)) {
      lastStreamSequence = message.seq;
      const read = decodeStored(this.subjects, message);
      if (read.quarantined === undefined) {
        events.push({ envelope: read.envelope, streamSequence: message.seq });
      } else {
        this.link.quarantine.add(read.quarantined);
        quarantined.push(read.quarantined);
      }
    }
    return { runId, events, quarantined, lastStreamSequence };
  }

  /**
   * The events of one literal subject after stream sequence `after`, through `last`. A
   * direct get may be answered by a replica that is behind the one that named `last`:
   * the read goes on until it reaches `last`, so the run's history has no hole.
   */
  private async readSubject(subject: string, after: number, last: number): Promise<StoredBytes[]> {
    const messages: StoredBytes[] = [];
    const take = (message: StoredBytes) => {
      messages.push({ seq: message.seq, subject: message.subject, data: message.data });
    };
    let from = after + 1;
    for (let attempt = 0; from <= last; attempt++) {
      if (attempt > 0) {
        if (attempt > READ_CATCH_UP_ATTEMPTS) {
          throw new BusUnavailableError(`${subject}: no server had the stream through ${last} yet`);
        }
        await sleep(10 * attempt);
      }
      from = await readBatches(this.link, from, subject, last, take);
    }
    return messages;
  }

  /** See Bus.readSince. */
  async readSince(
    startTimeMs: number,
    toSeq: number,
    handler: (event: StoredEvent) => void,
  ): Promise<number> {
    let read = 0;
    await readBatches(this.link, new Date(startTimeMs), this.subjects.allRuns, toSeq, (message) => {
      const envelope = this.link.readStored(message);
      if (envelope === undefined) return;
      handler({ envelope, streamSequence: message.seq });
      read += 1;
    });
    return read;
  }

  /** See Bus.readRange. */
  async readRange(filter: string, fromSeq: number, toSeq: number, max: number): Promise<RawMessage[]> {
    const messages: RawMessage[] = [];
    if (max <= 0) return messages;
    await readBatches(
      this.link,
      fromSeq,
      filter,
      toSeq,
      (message) => {
        messages.push({
          seq: message.seq,
          subject: message.subject,
          data: message.data,
          storedMs: message.time.getTime(),
        });
      },
      max,
    );
    return messages;
  }

  /** See Bus.allMessages. */
  async *allMessages(): AsyncIterable<StoredMessage> {
    const { firstSeq, lastSeq } = await this.provisioning.streamState();
    for (let seq = firstSeq; seq <= lastSeq && seq > 0; seq++) {
      const message = await this.link.jsm.streams.getMessage(this.stream, { seq }).catch(() => null);
      if (message) {
        yield { seq, subject: message.subject, data: message.data, headers: message.header.toString() };
      }
    }
  }

  /** See Bus.lastOnSubjects. */
  async lastOnSubjects(filters: string[]): Promise<StoredEvent[]> {
    const { js, jsm } = this.link;
    const created = await jsm.consumers.add(this.stream, {
      filter_subjects: filters,
      deliver_policy: DeliverPolicy.LastPerSubject,
      ack_policy: AckPolicy.None,
      mem_storage: true,
      // Removed by the server if this process dies before it deletes the consumer itself.
      inactive_threshold: nanos(60_000),
    });
    try {
      const events: StoredEvent[] = [];
      // Only what was there when the consumer was made; the caller's watch brings the rest.
      let left = created.num_pending;
      const consumer = await js.consumers.get(this.stream, created.name);
      while (left > 0) {
        const batch = await consumer.fetch({ max_messages: Math.min(left, READ_BATCH), expires: 5_000 });
        let received = 0;
        for await (const message of batch) {
          received += 1;
          left -= 1;
          const envelope = this.link.readStored(message);
          if (envelope !== undefined) events.push({ envelope, streamSequence: message.seq });
        }
        if (received === 0) {
          throw new BusUnavailableError(`reading the last events of ${filters.join(", ")} stalled`);
        }
      }
      return events;
    } finally {
      await jsm.consumers.delete(this.stream, created.name).catch(() => undefined);
    }
  }

  /** See Bus.countsByRun. */
  async countsByRun(type: EventType): Promise<Map<string, number>> {
    const counts = new Map<string, number>();
    for (const [subject, count] of await this.provisioning.subjectCounts(this.subjects.ofType(type))) {
      counts.set(this.subjects.runIdOf(subject), count);
    }
    return counts;
  }
}

function wrongLastSequence(description: string): number | undefined {
  const match = /wrong last sequence: (\d+)/.exec(description);
  return match ? Number(match[1]) : undefined;
}

/**
 * The headers every event is published with: its id as the message id (a retried publish
 * is deduplicated), its type and schema version (readers filter and upcast without
 * decoding), and its encoding.
 */
function eventHeaders(envelope: Envelope): MsgHdrs {
  const h = headers();
  h.set("Nats-Msg-Id", envelope.id);
  h.set("Holdfast-Type", envelope.type);
  h.set("Holdfast-Schema-Version", String(envelope.schemaVersion));
  h.set("Content-Type", "application/protobuf");
  return h;
}
