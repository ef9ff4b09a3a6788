import {
  Api,
  createIdGenerator,
  type EventPayload,
  encodeEnvelope,
  makeEnvelope,
  StepCompleted,
  StepStarted,
} from "@holdfast/events";
import { natsUrl, publishRaw, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Bus, connectBus } from "./bus.js";
import type { StoredEvent, WatchedEvent } from "./model.js";

// Whatever lands in the log (another engineer closes NATS to strangers, but a buggy or
// stolen service credential, another version, a damaged disk can still put it there),
// each read of the bus hands on what it can use and sets the rest aside: none throws.

const newId = createIdGenerator();
const warnings: Record<string, unknown>[] = [];
let bus: Bus;

beforeAll(async () => {
  bus = await connectBus({
    servers: natsUrl(),
    prefix: uniqueNamespace("quarantine"),
    name: "bus-quarantine-test",
    log: { warn: (fields) => warnings.push(fields) },
  });
  await bus.provision();
});
afterAll(async () => {
  await bus.close();
});

const started = (step: number): EventPayload => ({
  $case: "stepStarted",
  value: StepStarted.fromPartial({ stepId: `s${step}`, step, api: Api.API_OPENAI_CHAT_COMPLETIONS }),
});

const envelope = (runId: string, sequence: number, payload = started(sequence)) =>
  makeEnvelope({ id: newId(), runId, sequence, timestampMs: Date.now(), tag: "t", payload });

async function appendRun(runId: string, count: number): Promise<number> {
  let last = (await bus.readRun(runId)).lastStreamSequence;
  const first = (await bus.readRun(runId)).events.length + 1;
  for (let i = first; i < first + count; i++)
    last = (await bus.append(envelope(runId, i), last)).streamSequence;
  return last;
}

const garbage = () => new Uint8Array([0xff, 0xff, 0xff, 0x00, 0x13]);
const poisons = (runId: string): [string, Uint8Array][] => [
  ["StepCompleted", garbage()],
  // An envelope whose type disagrees with its payload.
  ["StepCompleted", encodeEnvelope({ ...envelope(runId, 3), type: "StepCompleted" })],
  // An int64 beyond 2^53 in a StepCompleted.
  [
    "StepCompleted",
    encodeEnvelope(
      envelope(runId, 3, {
        $case: "stepCompleted",
        value: StepCompleted.fromPartial({
          outcome: { stepId: "s2", step: 2, usage: { reported: true, inputTokens: 2 ** 60 } },
        }),
      }),
    ),
  ],
];

describe("the bus's reads of a log holding what no reader can use", () => {
  it("reads the run past each, lists them set aside, and keeps its last stream sequence on them so the next append lands", async () => {
    const runId = "poisoned-read";
    await appendRun(runId, 2);
    const seqs: number[] = [];
    for (const [type, data] of poisons(runId)) {
      seqs.push(await publishRaw(natsUrl(), bus.subjects.runEvent(runId, type as "StepCompleted"), data));
    }
    const history = await bus.readRun(runId);
    expect(history.events.map((e) => e.envelope.sequence)).toEqual([1, 2]);
    expect(history.quarantined.map((q) => [q.streamSequence, q.reason, q.runId, q.type])).toEqual([
      [seqs[0], "undecodable", runId, "StepCompleted"],
      [seqs[1], "type_mismatch", runId, "StepCompleted"],
      [seqs[2], "out_of_range", runId, "StepCompleted"],
    ]);
    expect([...history.quarantined[0]!.data]).toEqual([...garbage()]);
    expect(history.lastStreamSequence).toBe(seqs[2]);
    // The run goes on: its next event expects the last message of the run, poison or not.
    const next = await bus.append(envelope(runId, 3), history.lastStreamSequence);
    expect(next.duplicate).toBe(false);
    expect((await bus.readRun(runId, seqs[2])).events.map((e) => e.envelope.sequence)).toEqual([3]);
  });

  it("reads a period of the log past them (a service's fold at start)", async () => {
    const runId = "poisoned-since";
    const from = Date.now() - 1_000;
    await appendRun(runId, 1);
    await publishRaw(natsUrl(), bus.subjects.runEvent(runId, "StepCompleted"), garbage());
    await appendRun(runId, 1);
    const upTo = (await bus.streamState()).lastSeq;
    const read: StoredEvent[] = [];
    const handed = await bus.readSince(from, upTo, (event) => read.push(event));
    expect(read.filter((e) => e.envelope.runId === runId).map((e) => e.envelope.sequence)).toEqual([1, 2]);
    expect(handed).toBe(read.length);
  });

  it("leaves a last message it cannot use out of the last events per subject", async () => {
    const runId = "poisoned-last";
    await appendRun(runId, 1);
    const seq = await publishRaw(natsUrl(), bus.subjects.runEvent(runId, "RunHeld"), garbage());
    const last = await bus.lastOnSubjects([
      bus.subjects.ofType("RunHeld"),
      bus.subjects.ofType("StepStarted"),
    ]);
    expect(last.filter((e) => e.envelope.runId === runId).map((e) => e.envelope.type)).toEqual([
      "StepStarted",
    ]);
    expect(last.some((e) => e.streamSequence === seq)).toBe(false);
  });

  it("hands a watch's message on undecoded, and decode sets it aside: undefined, never a throw", async () => {
    const runId = "poisoned-watch";
    const heard: WatchedEvent[] = [];
    const watch = await bus.watch((event) => {
      if (event.runId === runId) heard.push(event);
    });
    try {
      await appendRun(runId, 1);
      const seq = await publishRaw(natsUrl(), bus.subjects.runEvent(runId, "StepStarted"), garbage());
      await waitFor(() => heard.length >= 2 || undefined, { message: "the watch did not bring both" });
      expect(heard.map((event) => bus.decode(event)?.sequence)).toEqual([1, undefined]);
      expect(heard[1]).toMatchObject({
        streamSequence: seq,
        subject: bus.subjects.runEvent(runId, "StepStarted"),
      });
    } finally {
      await watch.stop();
    }
  });

  it("counts each set-aside event once, by reason, and tells it once, however often it is read again", async () => {
    const runId = "poisoned-counted";
    const before = bus.quarantineCounts;
    await appendRun(runId, 1);
    const seq = await publishRaw(natsUrl(), bus.subjects.runEvent(runId, "StepCompleted"), garbage());
    for (let i = 0; i < 3; i++) await bus.readRun(runId);
    const after = bus.quarantineCounts;
    expect(after.total).toBe(before.total + 1);
    expect(after.by_reason.undecodable).toBe(before.by_reason.undecodable + 1);
    expect(warnings.filter((w) => w.seq === seq)).toEqual([
      {
        seq,
        subject: bus.subjects.runEvent(runId, "StepCompleted"),
        runId,
        type: "StepCompleted",
        reason: "undecodable",
        detail: expect.stringMatching(/^event is not a valid protobuf Envelope/),
        bytes: 5,
        preview: "ffffff0013",
      },
    ]);
  });
});
