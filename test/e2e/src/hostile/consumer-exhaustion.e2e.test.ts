import { readFileSync } from "node:fs";
import { inboxPrefix } from "@holdfast/bus";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect as natsConnect, nkeyAuthenticator } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// An attack run found that the reader's credential (`holdfast show`'s, read-only), and
// with it every run-time credential, may create durable consumers on the event stream
// without limit of its own: `permissionsFor` allows `$JS.API.CONSUMER.CREATE.<events>.*`
// to every principal, for "consumers of its own". nats-server holds at most 1,000
// consumers on a stream; once the thief's durables fill them (a few seconds), they stay,
// across restarts, and every service that makes a consumer when it starts (gateways,
// control, budget, scheduler: `Bus.follow`) fails to start with "maximum consumers limit
// reached". Under `holdfast up`, a gateway that restarts then crash-loops and no agent's
// call is served until someone with the admin credential deletes the thief's consumers.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
});

describe("the reader's credential", () => {
  it("cannot fill the event stream's consumers: a gateway started afterwards starts and serves", async () => {
    const seed = readFileSync(stack.credentials!.files.reader, "utf8").trim();
    const nc = await natsConnect({
      servers: stack.config.nats.url!,
      authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)),
      inboxPrefix: inboxPrefix("reader"),
      maxReconnectAttempts: 0,
    });
    const events = `${stack.config.nats.prefix.toUpperCase()}_EVENTS`;
    let made = 0;
    try {
      const jsm = await jetstreamManager(nc, { timeout: 10_000 });
      // Durable (they outlive the connection), filtered like a service's, 50 at a time,
      // until the server or the credential refuses one.
      for (let refused = false; !refused && made < 1_500; ) {
        const batch = await Promise.allSettled(
          Array.from({ length: 50 }, (_, i) =>
            jsm.consumers.add(events, {
              durable_name: `squatter-${made + i}`,
              ack_policy: "explicit",
              deliver_policy: "new",
              filter_subject: `${stack.config.nats.prefix}.run.>`,
            }),
          ),
        );
        made += batch.filter((result) => result.status === "fulfilled").length;
        refused = batch.some((result) => result.status === "rejected");
      }
    } finally {
      await nc.close();
    }
    // SECURITY.md: the reader's credential "makes no consumer at all".
    expect(made).toBe(0);

    const gateway = await stack.extraGateway({});
    const answer = await gateway
      .client({ "X-Holdfast-Run": "after-the-squatters" })
      .chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
    expect(answer.choices[0]?.message.content, `after ${made} consumers made by the reader`).toBeTruthy();
  }, 120_000);
});
