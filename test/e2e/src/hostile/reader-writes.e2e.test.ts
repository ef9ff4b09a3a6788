import { readFileSync } from "node:fs";
import { bucketName, inboxPrefix, type Principal } from "@holdfast/bus";
import { waitFor } from "@holdfast/test-harness";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect as natsConnect, nkeyAuthenticator } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, sleep, startStack } from "../stack.js";

// An attack run found that the reader's credential (`holdfast show`'s: "read the log, write
// nothing"), and with it every run-time credential, writes to the append-only log and to
// every other service's bucket. Any JetStream API call it may make (stream info, a direct
// get) can name any reply subject: permissions check only the subject published to, and
// JetStream publishes its answer on the reply subject, where the event stream or a KV
// bucket's stream stores it. So the reader appends messages no one may delete (deny_delete,
// deny_purge) to any run, on any event type's subject, and a loop of them grows the log
// without bound; and it overwrites the projector's lease on its consumer, which makes the
// projector stop projecting and stand by (again at each write).

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ config: { projector: { lease_ms: 3_000 } } });
});
afterAll(async () => {
  await stack?.close();
});

async function stolen(principal: Principal) {
  const seed = readFileSync(stack.credentials!.files[principal], "utf8").trim();
  return natsConnect({
    servers: stack.config.nats.url!,
    authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)),
    inboxPrefix: inboxPrefix(principal),
    maxReconnectAttempts: 0,
  });
}

const events = () => `${stack.config.nats.prefix.toUpperCase()}_EVENTS`;

/** The reader's stream-info request, its answer sent to `reply`; resolves once JetStream has answered it. */
async function infoAnsweredTo(reply: string): Promise<void> {
  const nc = await stolen("reader");
  try {
    nc.publish(`$JS.API.STREAM.INFO.${events()}`, new Uint8Array(), { reply });
    await nc.request(`$JS.API.STREAM.INFO.${events()}`, new Uint8Array(), { timeout: 5_000 });
    await sleep(250);
  } finally {
    await nc.close();
  }
}

describe("the reader's credential", () => {
  it("appends nothing to the log: no message lands on a run's subject", async () => {
    const runId = "written-by-the-reader";
    await infoAnsweredTo(stack.bus.subjects.runEvent(runId, "RunResumed"));
    const history = await stack.bus.readRun(runId);
    expect(history.events.length + history.quarantined.length).toBe(0);
    expect(history.lastStreamSequence).toBe(0);
  });

  it("writes nothing to the projector's lease: it is still the active projector's", async () => {
    const leases = bucketName(stack.config.nats.prefix, "LEASES");
    const key = `$KV.${leases}.projector.${stack.config.projector.consumer}`;
    const health = async () =>
      (await (await fetch(`${stack.analyticsUrl}/health`)).json()) as { role: string; lease_holder: string };
    const active = await waitFor(async () => ((await health()).role === "active" ? health() : undefined), {
      timeoutMs: 15_000,
      message: "the projector never became active",
    });

    await infoAnsweredTo(key);

    const admin = await stolen("admin");
    try {
      const jsm = await jetstreamManager(admin, { timeout: 5_000 });
      const lease = await jsm.streams.getMessage(`KV_${leases}`, { last_by_subj: key });
      expect(JSON.parse(new TextDecoder().decode(lease!.data))).toMatchObject({
        holder: active.lease_holder,
      });
    } finally {
      await admin.close();
    }
  });
});
