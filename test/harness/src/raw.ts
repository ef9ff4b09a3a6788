import { readFile } from "node:fs/promises";
import { jetstream } from "@nats-io/jetstream";
import { connect, nkeyAuthenticator } from "@nats-io/transport-node";

/**
 * Writes `data` straight into the stream that holds `subject`, over a plain NATS
 * connection, as anyone allowed to publish there could: bytes no Holdfast writer would
 * append (garbage, an envelope that lies), for tests of what readers of the log do with
 * them. On a server that asks for credentials, `credentials` is an nkey seed file allowed
 * to publish there (the admin's, standing for a credential stolen or a writer gone wrong).
 * Resolves with the stream sequence the message was stored at.
 */
export async function publishRaw(
  url: string,
  subject: string,
  data: Uint8Array,
  options: { credentials?: string | undefined } = {},
): Promise<number> {
  const authenticator =
    options.credentials === undefined
      ? undefined
      : nkeyAuthenticator(new TextEncoder().encode((await readFile(options.credentials, "utf8")).trim()));
  const nc = await connect({
    servers: url,
    name: "holdfast-test-raw-writer",
    ...(authenticator === undefined ? {} : { authenticator }),
  });
  try {
    const ack = await jetstream(nc).publish(subject, data);
    return ack.seq;
  } finally {
    await nc.close();
  }
}
