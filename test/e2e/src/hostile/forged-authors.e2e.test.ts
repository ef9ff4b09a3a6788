import { readFileSync } from "node:fs";
import { type BucketName, bucketName, inboxPrefix, type Principal } from "@holdfast/bus";
import { ActorKind, createIdGenerator, encodeEnvelope, makeEnvelope } from "@holdfast/events";
import { publishRaw } from "@holdfast/test-harness";
import { connect as natsConnect, nkeyAuthenticator } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "../stack.js";

// An attack run found that every service credential that keeps a KV bucket can append an
// event of any type to any run, whatever AUTHOR_OF says. The thief puts the event's bytes
// in its own bucket (it may write there), then asks JetStream's direct get for that value
// with the reply subject set to the event's subject (`<prefix>.run.<run>.RunStopped`).
// Publish permissions check the subject a client publishes to, never its reply subject,
// and JetStream publishes its answer there: the event stream captures the answer, and the
// log holds an operator's `RunStopped` that no control credential wrote. Readers fold it
// (the envelope is well formed, on its own type's subject, at the run's next sequence):
// `show` says "stopped by operator (control token)" and the gateway refuses the run's
// calls with 409. The same forges a `RunResumed` of a run an operator stopped. A
// credential with no bucket (the reader's, the scheduler's) may still direct-get from the
// event stream itself: an event's bytes stored on a subject of no consequence, answered to
// the subject of the event it should be.

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
 * `bytes` appended on `subject` by way of a direct get answered there: of the thief's own
 * bucket (a put, then a direct get of it), or, with no bucket, of the event stream, where
 * the bytes wait on a subject of no consequence (a decoy run's, put there with the admin's
 * credential). Then a direct get answered to the thief itself, which comes back only after
 * JetStream has answered the first.
 */
async function forge(
  principal: Principal,
  bucket: BucketName | undefined,
  subject: string,
  bytes: Uint8Array,
) {
  let stream: string;
  let stored: string;
  const nc = await stolen(principal);
  try {
    if (bucket === undefined) {
      stream = `${stack.config.nats.prefix.toUpperCase()}_EVENTS`;
      stored = stack.bus.subjects.runEvent(`decoy-${newId()}`, "StepStarted");
      await publishRaw(stack.config.nats.url!, stored, bytes, {
        credentials: stack.credentials!.files.admin,
      });
    } else {
      const name = bucketName(stack.config.nats.prefix, bucket);
      stream = `KV_${name}`;
      stored = `$KV.${name}.forged-${newId()}`;
      nc.publish(stored, bytes);
      await nc.flush();
    }
    const get = new TextEncoder().encode(JSON.stringify({ last_by_subj: stored, no_hdr: true }));
    nc.publish(`$JS.API.DIRECT.GET.${stream}`, get, { reply: subject });
    await nc.request(`$JS.API.DIRECT.GET.${stream}`, get, { timeout: 5_000 });
  } finally {
    await nc.close();
  }
}

/** The thieves: each credential that may not write an operator's events, by its own bucket or by the event stream. */
const THIEVES: { principal: Principal; bucket?: BucketName; by: string }[] = [
  { principal: "budget", bucket: "BUDGET_LEASES", by: "its bucket BUDGET_LEASES" },
  { principal: "projector", bucket: "LEASES", by: "its bucket LEASES" },
  { principal: "gateway", bucket: "GATEWAYS", by: "its bucket GATEWAYS" },
  ...(["budget", "projector", "gateway", "scheduler", "reader"] as const).map((principal) => ({
    principal,
    by: "the event stream",
  })),
];

describe.each(THIEVES)("a stolen $principal credential, by a direct get of $by", ({ principal, bucket }) => {
  it("cannot stop a run as an operator: no RunStopped lands in the log, and the run's calls go on", async () => {
    const runId = `forged-stop-by-${principal}-via-${bucket ?? "events"}`;
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

    // The marker: the run's next call, its steps appended by the gateway (their author)
    // after the attempt. The stream stores in order, so a read that holds the marker holds
    // whatever the attempt got stored before it.
    await ask(runId);
    expect((await stack.settled(runId, 2)).completed).toBe(2);
    const history = await stack.bus.readRun(runId);
    const types = history.events.map((e) => e.envelope.type);
    expect(types.filter((type) => type === "StepCompleted")).toHaveLength(2);
    expect(types).not.toContain("RunStopped");
    expect(history.events.map((e) => e.envelope.id)).not.toContain(stop.id);
    expect(history.quarantined).toEqual([]);
    expect((await stack.run(runId)).status).not.toBe("stopped");
  });

  it("cannot resume a run an operator stopped", async () => {
    const runId = `forged-resume-by-${principal}-via-${bucket ?? "events"}`;
    await ask(runId);
    const before = await stack.settled(runId, 1);
    // The operator's stop, written with the control service's own credential.
    const control = await stack.connect("control");
    let stopped: number;
    try {
      ({ streamSequence: stopped } = await control.append(
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
      ));
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

    // The marker: the operator's second stop, appended by the control service (its author)
    // only if the run's last message is still the first stop: a message the attempt got
    // stored would be after that one, and the append would be refused.
    const marker = makeEnvelope({
      id: newId(),
      runId,
      sequence: before.lastSequence + 2,
      timestampMs: Date.now(),
      tag: "",
      payload: {
        $case: "runStopped",
        value: { actor: operator, reason: "marker", selector: undefined },
      },
    });
    const again = await stack.connect("control");
    try {
      await again.append(marker, stopped);
    } finally {
      await again.close();
    }
    const history = await stack.bus.readRun(runId);
    expect(history.events.map((e) => e.envelope.id)).toContain(marker.id);
    expect(history.events.map((e) => e.envelope.type)).not.toContain("RunResumed");
    expect(history.events.map((e) => e.envelope.id)).not.toContain(resume.id);
    expect(history.quarantined).toEqual([]);
    expect((await stack.run(runId)).status).toBe("stopped");
  });
});
