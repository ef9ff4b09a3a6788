import { readFileSync } from "node:fs";
import { type BucketName, bucketName, inboxPrefix, type Principal } from "@holdfast/bus";
import { ActorKind, createIdGenerator, encodeEnvelope, makeEnvelope } from "@holdfast/events";
import { connect as natsConnect, nkeyAuthenticator } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, sleep, startStack } from "../stack.js";

// An attack run found that every service credential that keeps a KV bucket can append an
// event of any type to any run, whatever AUTHOR_OF says. The thief puts the event's bytes
// in its own bucket (it may write there), then asks JetStream's direct get for that value
// with the reply subject set to the event's subject (`<prefix>.run.<run>.RunStopped`).
// Publish permissions check the subject a client publishes to, never its reply subject,
// and JetStream publishes its answer there: the event stream captures the answer, and the
// log holds an operator's `RunStopped` that no control credential wrote. Readers fold it
// (the envelope is well formed, on its own type's subject, at the run's next sequence):
// `show` says "stopped by operator (control token)" and the gateway refuses the run's
// calls with 409. The same forges a `RunResumed` of a run an operator stopped.

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.close();
});

const ask = (runId: string) =>
  stack.client({ headers: { "X-Holdfast-Run": runId } }).chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: `hi from ${runId}` }],
  });

const newId = createIdGenerator();
const operator = { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "control token" };

/** A raw NATS connection with one principal's stolen credential, as a process on the host would make it. */
async function stolen(principal: Principal) {
  const seed = readFileSync(stack.credentials!.files[principal], "utf8").trim();
  return natsConnect({
    servers: stack.config.nats.url!,
    authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)),
    inboxPrefix: inboxPrefix(principal),
    maxReconnectAttempts: 0,
  });
}

/**
 * `bytes` appended on `subject` by way of the thief's own bucket: a put, then a direct get
 * of it answered to `subject`; then a direct get answered to the thief itself, which comes
 * back only after JetStream has answered the first; then a moment for the stream to store
 * what it captured of that answer.
 */
async function forge(principal: Principal, bucket: BucketName, subject: string, bytes: Uint8Array) {
  const nc = await stolen(principal);
  try {
    const name = bucketName(stack.config.nats.prefix, bucket);
    const key = `$KV.${name}.forged-${newId()}`;
    nc.publish(key, bytes);
    await nc.flush();
    const get = new TextEncoder().encode(JSON.stringify({ last_by_subj: key, no_hdr: true }));
    nc.publish(`$JS.API.DIRECT.GET.KV_${name}`, get, { reply: subject });
    await nc.request(`$JS.API.DIRECT.GET.KV_${name}`, get, { timeout: 5_000 });
    await sleep(250);
  } finally {
    await nc.close();
  }
}

const THIEVES: { principal: Principal; bucket: BucketName }[] = [
  { principal: "budget", bucket: "BUDGET_LEASES" },
  { principal: "projector", bucket: "LEASES" },
  { principal: "gateway", bucket: "GATEWAYS" },
];

describe.each(THIEVES)("a stolen $principal credential (it writes $bucket)", ({ principal, bucket }) => {
  it("cannot stop a run as an operator: no RunStopped lands in the log, and the run's calls go on", async () => {
    const runId = `forged-stop-by-${principal}`;
    await ask(runId);
    const before = await stack.settled(runId, 1);
    const stop = makeEnvelope({
      id: newId(),
      runId,
      sequence: before.lastSequence + 1,
      timestampMs: Date.now(),
      tag: "",
      payload: {
        $case: "runStopped",
        value: { actor: operator, reason: `forged by ${principal}`, selector: undefined },
      },
    });
    await forge(principal, bucket, stack.bus.subjects.runEvent(runId, "RunStopped"), encodeEnvelope(stop));

    const types = (await stack.bus.readRun(runId)).events.map((e) => e.envelope.type);
    expect(types).not.toContain("RunStopped");
    expect((await stack.run(runId)).status).not.toBe("stopped");
    await ask(runId);
    expect((await stack.settled(runId, 2)).completed).toBe(2);
  });

  it("cannot resume a run an operator stopped", async () => {
    const runId = `forged-resume-by-${principal}`;
    await ask(runId);
    const before = await stack.settled(runId, 1);
    // The operator's stop, written with the control service's own credential.
    const control = await stack.connect("control");
    try {
      await control.append(
        makeEnvelope({
          id: newId(),
          runId,
          sequence: before.lastSequence + 1,
          timestampMs: Date.now(),
          tag: "",
          payload: {
            $case: "runStopped",
            value: { actor: operator, reason: "operator", selector: undefined },
          },
        }),
        (await control.readRun(runId)).lastStreamSequence,
      );
    } finally {
      await control.close();
    }
    expect((await stack.run(runId)).status).toBe("stopped");

    const resume = makeEnvelope({
      id: newId(),
      runId,
      sequence: before.lastSequence + 2,
      timestampMs: Date.now(),
      tag: "",
      payload: {
        $case: "runResumed",
        value: {
          actor: operator,
          reason: `forged by ${principal}`,
          selector: undefined,
          limits: undefined,
          overrides: false,
          checkpoint: false,
          compact: 0,
        },
      },
    });
    await forge(principal, bucket, stack.bus.subjects.runEvent(runId, "RunResumed"), encodeEnvelope(resume));

    const types = (await stack.bus.readRun(runId)).events.map((e) => e.envelope.type);
    expect(types).not.toContain("RunResumed");
    expect((await stack.run(runId)).status).toBe("stopped");
  });
});
