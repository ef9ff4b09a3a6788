import { readFileSync } from "node:fs";
import { bucketName, inboxPrefix, type Principal } from "@holdfast/bus";
import { ActorKind, createIdGenerator, makeEnvelope } from "@holdfast/events";
import { waitFor } from "@holdfast/test-harness";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { type Msg, connect as natsConnect, nkeyAuthenticator } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

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

/**
 * The reader's JetStream API request `api` (with `body`), its answer sent to `reply`;
 * resolves once JetStream has answered a second, identical request to the reader itself,
 * which it does only after answering the first.
 */
async function answeredTo(api: string, body: Uint8Array, reply: string): Promise<void> {
  const nc = await stolen("reader");
  try {
    nc.publish(api, body, { reply });
    await nc.request(api, body, { timeout: 5_000 });
  } finally {
    await nc.close();
  }
}

const newId = createIdGenerator();
const operator = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "control token" };

/**
 * After an attempt to write to `runId`, the admin's marker, appended to the run only if
 * the run still has no message at all (its expected last sequence is 0): the stream stores
 * in order, so a message the attempt got stored would be there before it, and the append
 * would be refused. Resolves with the run as read once the marker is in the log.
 */
async function afterMarker(runId: string) {
  const marker = makeEnvelope({
    id: newId(),
    runId,
    sequence: 1,
    timestampMs: Date.now(),
    tag: "",
    payload: {
      $case: "runHeld",
      value: { actor: operator, reason: "marker", selector: undefined, ruleId: "" },
    },
  });
  await stack.bus.append(marker, 0);
  const history = await stack.bus.readRun(runId);
  return { marker, history };
}

describe("the reader's credential", () => {
  it("appends nothing to the log: no message lands on a run's subject", async () => {
    const runId = "written-by-the-reader";
    await answeredTo(
      `$JS.API.STREAM.INFO.${events()}`,
      new Uint8Array(),
      stack.bus.subjects.runEvent(runId, "RunResumed"),
    );
    const { marker, history } = await afterMarker(runId);
    expect(history.quarantined).toEqual([]);
    expect(history.events.map((e) => e.envelope.id)).toEqual([marker.id]);
  });

  it("copies no stored event onto another run by a direct get answered to its subject", async () => {
    // A stored event, the gateway's, on a run of its own.
    await stack.client({ headers: { "X-Holdfast-Run": "copied-from" } }).chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "hi" }],
    });
    await stack.settled("copied-from", 1);
    const runId = "copied-to-by-the-reader";
    const get = new TextEncoder().encode(
      JSON.stringify({
        last_by_subj: stack.bus.subjects.runEvent("copied-from", "StepCompleted"),
        no_hdr: true,
      }),
    );
    await answeredTo(
      `$JS.API.DIRECT.GET.${events()}`,
      get,
      stack.bus.subjects.runEvent(runId, "StepCompleted"),
    );
    const { marker, history } = await afterMarker(runId);
    expect(history.quarantined).toEqual([]);
    expect(history.events.map((e) => e.envelope.id)).toEqual([marker.id]);
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

    // The admin hears every message on the bucket's subjects as the server takes it,
    // from before the attempt until its own marker after it: a message the attempt got
    // onto the lease's key would come before the marker (a renewal of the lease would
    // replace it in the bucket, but not here).
    const admin = await stolen("admin");
    try {
      const heard: Msg[] = [];
      const markerKey = `$KV.${leases}.marker-${newId()}`;
      const sub = admin.subscribe(`$KV.${leases}.>`, {
        callback: (_error, msg) => {
          heard.push(msg);
        },
      });
      await admin.flush();

      await answeredTo(`$JS.API.STREAM.INFO.${events()}`, new Uint8Array(), key);

      await jetstream(admin).publish(markerKey, new TextEncoder().encode("marker"));
      await waitFor(() => (heard.some((msg) => msg.subject === markerKey) ? true : undefined), {
        timeoutMs: 5_000,
        message: "the marker was not heard",
      });
      sub.unsubscribe();
      const written = heard
        .filter((msg) => msg.subject === key)
        .map((msg) => (JSON.parse(new TextDecoder().decode(msg.data)) as { holder?: string }).holder);
      expect(
        written.every((holder) => holder === active.lease_holder),
        JSON.stringify(written),
      ).toBe(true);

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
