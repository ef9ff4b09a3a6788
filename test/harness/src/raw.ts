import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

/**
 * Writes `data` straight into the stream that holds `subject`, over a plain NATS
 * connection, as anyone allowed to publish there could: bytes no Holdfast writer would
 * append (garbage, an envelope that lies), for tests of what readers of the log do with
 * them. Resolves with the stream sequence the message was stored at.
 */
export async function publishRaw(url: string, subject: string, data: Uint8Array): Promise<number> {
  const nc = await connect({ servers: url, name: "holdfast-test-raw-writer" });
  try {
    const ack = await jetstream(nc).publish(subject, data);
    return ack.seq;
  } finally {
    await nc.close();
  }
}
