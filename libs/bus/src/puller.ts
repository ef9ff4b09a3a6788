import { createInbox, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { BusUnavailableError } from "./errors.js";
import type { PulledMessage, Puller } from "./model.js";

interface Reading {
  readonly messages: PulledMessage[];
  readonly resolve: (messages: PulledMessage[]) => void;
  readonly reject: (error: Error) => void;
}

/**
 * Pulls from one pull consumer in batches of whatever is there now (`no_wait`),
 * never leaving a pull open for the server to feed one message at a time: a consumer that
 * pulls every `linger` takes a busy stream in a few large deliveries, a quiet one in one
 * empty answer per pull. One pull at a time (JetStream delivers on the messages' own
 * subjects, so the pull in flight is what any delivery belongs to).
 */
export class NatsPuller implements Puller {
  private readonly inbox: string;
  private readonly subscription: Subscription;
  private current: Reading | undefined;
  private wanted = 0;

  constructor(
    private readonly nc: NatsConnection,
    private readonly stream: string,
    private readonly consumer: string,
    private readonly timeoutMs: number,
    /** The connection's inbox prefix: deliveries come where this process's credential may read. */
    inboxPrefix?: string,
  ) {
    this.inbox = createInbox(inboxPrefix);
    this.subscription = nc.subscribe(this.inbox, {
      callback: (error, msg) => {
        if (error === null) this.received(msg);
      },
    });
  }

  async pull(max: number): Promise<PulledMessage[]> {
    if (this.current !== undefined) throw new Error("one pull at a time");
    return new Promise<PulledMessage[]>((resolve, reject) => {
      const timer = setTimeout(() => {
        if (this.current !== reading) return;
        this.current = undefined;
        // What arrived is kept (unacknowledged, it is delivered again after ack_wait
        // anyway); silence means the consumer or its server is gone.
        if (reading.messages.length > 0) reading.resolve(reading.messages);
        else
          reading.reject(
            new BusUnavailableError(`pull from ${this.consumer}: no answer within ${this.timeoutMs} ms`),
          );
      }, this.timeoutMs);
      const reading: Reading = {
        messages: [],
        resolve: (messages) => {
          clearTimeout(timer);
          resolve(messages);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      this.current = reading;
      this.wanted = max;
      try {
        this.nc.publish(
          `$JS.API.CONSUMER.MSG.NEXT.${this.stream}.${this.consumer}`,
          JSON.stringify({ batch: max, no_wait: true }),
          { reply: this.inbox },
        );
      } catch (error) {
        this.current = undefined;
        reading.reject(new BusUnavailableError(`pull from ${this.consumer} failed`, { cause: error }));
      }
    });
  }

  async ackThrough(message: PulledMessage): Promise<void> {
    try {
      await this.nc.request(message.reply, ACK, { timeout: this.timeoutMs });
    } catch (error) {
      throw new BusUnavailableError(`acknowledging ${this.consumer}'s delivery failed`, { cause: error });
    }
  }

  close(): void {
    this.subscription.unsubscribe();
    const current = this.current;
    this.current = undefined;
    current?.reject(new BusUnavailableError("the puller closed"));
  }

  private received(msg: Msg): void {
    const reading = this.current;
    if (reading === undefined) return;
    const reply = msg.reply;
    if (reply?.startsWith("$JS.ACK.")) {
      const info = ackInfo(reply);
      reading.messages.push({
        seq: info.streamSequence,
        delivery: info.consumerSequence,
        subject: msg.subject,
        data: msg.data,
        storedMs: info.storedMs,
        redelivered: info.deliveries > 1,
        reply,
      } satisfies PulledMessage);
      if (reading.messages.length < this.wanted) return;
      this.current = undefined;
      reading.resolve(reading.messages);
      return;
    }
    // A status: 404 nothing (more) to deliver, 408 the pull expired; 409 the consumer is
    // gone or changed, which the caller finds out on its next look.
    this.current = undefined;
    const code = msg.headers?.code ?? 0;
    if (code === 404 || code === 408 || reading.messages.length > 0) reading.resolve(reading.messages);
    else {
      reading.reject(
        new BusUnavailableError(
          `pull from ${this.consumer} failed: ${code} ${msg.headers?.description ?? msg.string()}`,
        ),
      );
    }
  }
}

const ACK = new TextEncoder().encode("+ACK");

/** Stream and consumer sequences, delivery count and store time from a JetStream ack subject (both of its forms). */
function ackInfo(reply: string): {
  streamSequence: number;
  consumerSequence: number;
  deliveries: number;
  storedMs: number;
} {
  const tokens = reply.split(".");
  // $JS.ACK.<stream>.<consumer>.<deliveries>.<stream seq>.<consumer seq>.<ts ns>.<pending>, or
  // with <domain>.<account hash> after ACK (and a random token at the end).
  const at = tokens.length === 9 ? 4 : 6;
  return {
    deliveries: Number(tokens[at]),
    streamSequence: Number(tokens[at + 1]),
    consumerSequence: Number(tokens[at + 2]),
    storedMs: Math.floor(Number(tokens[at + 3]) / 1e6),
  };
}
