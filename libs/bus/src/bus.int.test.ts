import {
  ActorKind,
  Api,
  createIdGenerator,
  type Envelope,
  type EventPayload,
  foldRun,
  makeEnvelope,
  RunSource,
} from "@holdfast/events";
import { natsUrl, uniqueNamespace, waitFor } from "@holdfast/test-harness";
import { AckPolicy, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Bus, connectBus } from "./bus.js";
import { BusRejectedError, ConcurrencyError } from "./errors.js";

const newId = createIdGenerator();
let bus: Bus;

beforeAll(async () => {
  bus = await connectBus({ servers: natsUrl(), prefix: uniqueNamespace("bus"), name: "bus-int-test" });
  await bus.provision();
});
afterAll(async () => {
  await bus.close();
});

function started(step: number): EventPayload {
  return {
    $case: "stepStarted",
    value: {
      stepId: `step-${step}`,
      step,
      api: Api.API_OPENAI_CHAT_COMPLETIONS,
      model: "gpt-4o-mini",
      stream: false,
      identity: { source: RunSource.RUN_SOURCE_HEADER, key: "x-run-id", fingerprint: "", generation: 0 },
      messageCount: 1,
      upstream: "http://127.0.0.1:1",
      gateway: "test",
      estimatedInputTokens: 0,
      promptHash: "",
      reservedNanoUsd: 0,
      budgetLeases: [],
      prediction: undefined,
      route: undefined,
      origin: undefined,
    },
  };
}

function envelope(runId: string, sequence: number, payload = started(sequence)): Envelope {
  return makeEnvelope({ id: newId(), runId, sequence, timestampMs: Date.now(), tag: "", payload });
}

async function appendRun(runId: string, count: number): Promise<number> {
  let last = 0;
  for (let i = 1; i <= count; i++) last = (await bus.append(envelope(runId, i), last)).streamSequence;
  return last;
}

describe("event bus", () => {
  it("provisions idempotently: a second provision of the same stream changes nothing", async () => {
    const before = await bus.streamConfig();
    await bus.provision();
    const after = await bus.streamConfig();
    expect(after).toEqual(before);
    expect(after).toMatchObject({
      storage: "file",
      allowDirect: true,
      denyDelete: true,
      denyPurge: true,
    });
  });

  it("replays one run's events in order, and only that run's", async () => {
    await appendRun("replay-a", 3);
    await appendRun("replay-b", 2);
    await bus.append(envelope("replay-a", 4), (await bus.readRun("replay-a")).lastStreamSequence);
    const history = await bus.readRun("replay-a");
    expect(history.events.map((e) => e.envelope.sequence)).toEqual([1, 2, 3, 4]);
    expect(history.events.every((e) => e.envelope.runId === "replay-a")).toBe(true);
    expect(
      foldRun(
        "replay-a",
        history.events.map((e) => e.envelope),
      ).started,
    ).toBe(4);
    // A reader that knows the run up to its second event reads only what follows.
    const rest = await bus.readRun("replay-a", history.events[1]!.streamSequence);
    expect(rest.events.map((e) => e.envelope.sequence)).toEqual([3, 4]);
    expect(rest.lastStreamSequence).toBe(history.lastStreamSequence);
    const none = await bus.readRun("replay-a", history.lastStreamSequence);
    expect(none).toMatchObject({ events: [], lastStreamSequence: history.lastStreamSequence });
  });

  it("watches every event appended from now on, in stream order, with its run and place", async () => {
    const seen: { runId: string; streamSequence: number }[] = [];
    const watch = await bus.watch(({ runId, streamSequence }) => seen.push({ runId, streamSequence }));
    const a = await bus.append(envelope("watch.a", 1), 0);
    const b = await bus.append(envelope("watch b", 1), 0);
    const c = await bus.append(envelope("watch.a", 2), a.streamSequence);
    await waitFor(() => seen.length >= 3, { timeoutMs: 5_000, message: "the watch saw too little" });
    await watch.stop();
    expect(seen.filter((e) => e.runId.startsWith("watch"))).toEqual([
      { runId: "watch.a", streamSequence: a.streamSequence },
      { runId: "watch b", streamSequence: b.streamSequence },
      { runId: "watch.a", streamSequence: c.streamSequence },
    ]);
  });

  it("hands a busy log to a watch in a few large batches, none missed or repeated, and goes on after its consumer is lost", async () => {
    const seen: number[] = [];
    let batches = 0;
    let inBatch = false;
    const watch = await bus.watch(
      ({ runId, streamSequence }) => {
        if (!runId.startsWith("batched-")) return;
        seen.push(streamSequence);
        if (!inBatch) {
          batches += 1;
          inBatch = true;
          queueMicrotask(() => {
            inBatch = false;
          });
        }
      },
      { lingerMs: 200 },
    );
    const first = await Promise.all(
      Array.from({ length: 300 }, (_, i) => bus.append(envelope(`batched-${i}`, 1), 0)),
    );
    await waitFor(() => seen.length >= 300, { timeoutMs: 5_000, message: "the watch saw too little" });
    // 300 appends within a linger or two: a handful of takes, not one per event.
    expect(batches).toBeLessThanOrEqual(5);
    // The server drops the watch's consumer (as when its server is lost): the watch makes
    // another from the last event it handed on.
    const nc = await connect({ servers: natsUrl() });
    try {
      const jsm = await jetstreamManager(nc);
      for await (const info of jsm.consumers.list(bus.eventsStream)) {
        if (
          info.config.ack_policy === AckPolicy.None &&
          info.config.filter_subject === bus.subjects.allRuns
        ) {
          await jsm.consumers.delete(bus.eventsStream, info.name);
        }
      }
    } finally {
      await nc.close();
    }
    const second = await Promise.all(
      Array.from({ length: 20 }, (_, i) => bus.append(envelope(`batched-${i}`, 2), first[i]!.streamSequence)),
    );
    await waitFor(() => seen.length >= 320, {
      timeoutMs: 10_000,
      message: "the watch stopped after its consumer went",
    });
    await watch.stop();
    const expected = [...first, ...second].map((r) => r.streamSequence).sort((a, b) => a - b);
    expect(seen).toEqual(expected);
  });

  it("follows events of the given types the moment they are stored, and nothing else", async () => {
    const seen: { runId: string; type: string }[] = [];
    const follow = await bus.follow(["RunHeld"], ({ runId, type }) => seen.push({ runId, type }));
    try {
      await bus.append(envelope("follow-a", 1), 0);
      const held: EventPayload = {
        $case: "runHeld",
        value: {
          actor: { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "ops" },
          reason: "look",
          selector: undefined,
          ruleId: "",
        },
      };
      const last = (await bus.readRun("follow-a")).lastStreamSequence;
      await bus.append(envelope("follow-a", 2, held), last);
      await waitFor(() => seen.length >= 1, { timeoutMs: 5_000, message: "the follow saw nothing" });
      expect(seen).toEqual([{ runId: "follow-a", type: "RunHeld" }]);
    } finally {
      await follow.stop();
    }
  });

  it("keeps many appends in flight at once and matches every ack to its append", async () => {
    const appends = Array.from({ length: 500 }, (_, i) => bus.append(envelope(`many-${i}`, 1), 0));
    const results = await Promise.all(appends);
    expect(new Set(results.map((r) => r.streamSequence)).size).toBe(500);
    for (const [i, result] of results.entries()) {
      const history = await bus.readRun(`many-${i}`);
      expect(history.lastStreamSequence).toBe(result.streamSequence);
    }
  });

  it("replays a run longer than one read batch", async () => {
    await appendRun("long-run", 1_200);
    const history = await bus.readRun("long-run");
    expect(history.events).toHaveLength(1_200);
    expect(history.events.at(-1)?.envelope.sequence).toBe(1_200);
  });

  it("replays a run whose events are of many types, interleaved with other runs, from any point", async () => {
    const held = (i: number): EventPayload => ({
      $case: "runHeld",
      value: {
        actor: { kind: ActorKind.ACTOR_KIND_OPERATOR, name: "t" },
        reason: `${i}`,
        selector: undefined,
        ruleId: "",
      },
    });
    let last = 0;
    for (let i = 1; i <= 1_100; i++) {
      last = (await bus.append(envelope("mixed-run", i, i % 3 === 0 ? held(i) : started(i)), last))
        .streamSequence;
      if (i % 100 === 0) await bus.append(envelope(`mixed-other-${i}`, 1), 0);
    }
    const all = await bus.readRun("mixed-run");
    expect(all.events.map((e) => e.envelope.sequence)).toEqual(
      Array.from({ length: 1_100 }, (_, i) => i + 1),
    );
    expect(all.events.map((e) => e.envelope.type).slice(0, 3)).toEqual([
      "StepStarted",
      "StepStarted",
      "RunHeld",
    ]);
    expect(all.lastStreamSequence).toBe(last);
    const from = all.events[700]!.streamSequence;
    const rest = await bus.readRun("mixed-run", from);
    expect(rest.events.map((e) => e.envelope.sequence)).toEqual(
      Array.from({ length: 399 }, (_, i) => i + 702),
    );
  });

  it("reads the last event of every matching subject, past the 1,024 a direct get allows", async () => {
    const own = await connectBus({
      servers: natsUrl(),
      prefix: uniqueNamespace("last"),
      name: "bus-int-last",
    });
    try {
      await own.provision();
      expect(await own.lastOnSubjects([own.subjects.ofType("StepStarted")])).toEqual([]);
      const runs = 1_100;
      await Promise.all(
        Array.from({ length: runs }, async (_, i) => {
          const first = await own.append(envelope(`last-${i}`, 1), 0);
          await own.append(envelope(`last-${i}`, 2), first.streamSequence);
        }),
      );
      const last = await own.lastOnSubjects([
        own.subjects.ofType("StepStarted"),
        own.subjects.ofType("RunHeld"),
      ]);
      expect(last).toHaveLength(runs);
      expect(new Set(last.map((e) => e.envelope.runId)).size).toBe(runs);
      expect(last.every((e) => e.envelope.sequence === 2)).toBe(true);
    } finally {
      await own.close();
    }
  });

  it("reads an unknown run as empty", async () => {
    expect(await bus.readRun("never-seen")).toEqual({
      runId: "never-seen",
      events: [],
      quarantined: [],
      lastStreamSequence: 0,
    });
  });

  it("refuses an append on a stale expected sequence with a typed ConcurrencyError", async () => {
    const last = await appendRun("occ", 2);
    const stale = bus.append(envelope("occ", 3), last - 1);
    await expect(stale).rejects.toBeInstanceOf(ConcurrencyError);
    await expect(bus.append(envelope("occ", 3), last - 1)).rejects.toMatchObject({
      code: "HOLDFAST_CONCURRENCY",
      retryable: true,
      actualStreamSequence: last,
    });
    // Nothing was written by the refused appends.
    expect((await bus.readRun("occ")).events).toHaveLength(2);
  });

  it("lets exactly one of two racing writers append at the same position", async () => {
    const last = await appendRun("race", 1);
    const results = await Promise.allSettled([
      bus.append(envelope("race", 2), last),
      bus.append(envelope("race", 2), last),
    ]);
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    expect(
      results.filter((r) => r.status === "rejected" && r.reason instanceof ConcurrencyError),
    ).toHaveLength(1);
    expect((await bus.readRun("race")).events.map((e) => e.envelope.sequence)).toEqual([1, 2]);
  });

  it("refuses an event larger than the server takes as for good (BusRejectedError), not as the log being away", async () => {
    const oversized = started(1);
    if (oversized.$case === "stepStarted") oversized.value.model = "x".repeat(2_000_000);
    const appended = bus.append(envelope("too-large", 1, oversized), 0);
    await expect(appended).rejects.toBeInstanceOf(BusRejectedError);
    await expect(appended).rejects.toMatchObject({
      retryable: false,
      message: expect.stringMatching(/max_payload/),
    });
    // Nothing of it landed, and the run takes its next event as if it had never been tried.
    expect((await bus.readRun("too-large")).events).toHaveLength(0);
    await bus.append(envelope("too-large", 1), 0);
    expect((await bus.readRun("too-large")).events).toHaveLength(1);
  });

  it("writes a retried append once and reports it as a duplicate", async () => {
    const last = await appendRun("retry", 1);
    const event = envelope("retry", 2);
    const first = await bus.append(event, last);
    const again = await bus.append(event, last);
    expect(again).toEqual({ streamSequence: first.streamSequence, duplicate: true });
    expect((await bus.readRun("retry")).events).toHaveLength(2);
  });

  it("keeps runs with awkward ids apart and each one whole", async () => {
    const ids = [
      "a.b",
      "a",
      "a.*",
      "a.>",
      ">",
      "*",
      "with space",
      "ünïcödé",
      "日本語",
      "🚀",
      "_YQ",
      "a_b",
      "A.B",
    ];
    for (const [i, id] of ids.entries()) await appendRun(id, i + 1);
    for (const [i, id] of ids.entries()) {
      const history = await bus.readRun(id);
      expect(history.events.map((e) => e.envelope.runId)).toEqual(Array(i + 1).fill(id));
    }
  });
});

describe("reads of a stretch of the log, a batch at a time", () => {
  // 700 runs of one event each: more than one read batch (512) of the stream.
  let since: number;
  let seqs: number[];
  beforeAll(async () => {
    since = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 5));
    const results = await Promise.all(
      Array.from({ length: 700 }, (_, i) => bus.append(envelope(`stretch-${i}`, 1), 0)),
    );
    seqs = results.map((r) => r.streamSequence).sort((a, b) => a - b);
  });

  it("hands on every event from a time through a sequence, past one read batch, in order and once", async () => {
    const read: number[] = [];
    const handed = await bus.readSince(since, seqs[599]!, (event) => read.push(event.streamSequence));
    expect(read).toEqual(seqs.slice(0, 600));
    expect(handed).toBe(600);
  });

  it("reads a range up to its end or its most, whichever comes first, past one read batch", async () => {
    const all = bus.subjects.allRuns;
    const most = await bus.readRange(all, seqs[0]!, seqs[699]!, 650);
    expect(most.map((m) => m.seq)).toEqual(seqs.slice(0, 650));
    const toEnd = await bus.readRange(all, seqs[10]!, seqs[599]!, 1_000);
    expect(toEnd.map((m) => m.seq)).toEqual(seqs.slice(10, 600));
    const one = await bus.readRange(bus.subjects.run("stretch-3"), seqs[0]!, seqs[699]!, 10);
    expect(one).toHaveLength(1);
    expect(one[0]?.subject).toBe(bus.subjects.runEvent("stretch-3", "StepStarted"));
    expect(await bus.readRange(all, seqs[5]!, seqs[4]!, 10)).toEqual([]);
    expect(await bus.readRange(all, seqs[0]!, seqs[699]!, 0)).toEqual([]);
  });
});

describe("deferred appends", () => {
  it("wait to share a write with the next urgent append (or a flush), and land in order", async () => {
    // A bus whose deferred appends would wait a minute on their own.
    const patient = await connectBus({
      servers: natsUrl(),
      prefix: bus.subjects.prefix,
      name: "bus-int-deferred",
      deferMs: 60_000,
    });
    try {
      let settled = false;
      const deferred = patient.append(envelope("deferred-a", 1), 0, { defer: true });
      void deferred.then(() => {
        settled = true;
      });
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(settled).toBe(false);
      expect((await bus.readRun("deferred-a")).events).toHaveLength(0);

      // An urgent append on another run takes the waiting one with it, ahead of itself.
      const urgent = await patient.append(envelope("deferred-b", 1), 0);
      const waited = await deferred;
      expect(waited.streamSequence).toBeLessThan(urgent.streamSequence);

      // And a flush sends one on its own.
      const second = patient.append(envelope("deferred-a", 2), waited.streamSequence, { defer: true });
      patient.flushDeferred();
      expect((await second).streamSequence).toBeGreaterThan(urgent.streamSequence);
      expect((await bus.readRun("deferred-a")).events.map((e) => e.envelope.sequence)).toEqual([1, 2]);
    } finally {
      await patient.close();
    }
  });
});

describe("putValue", () => {
  it("puts a key of a bucket as KV.put does, readable and watched as any put", async () => {
    const kv = await bus.keyValue("RESPONSES");
    const watch = await kv.watch({ updatesOnly: true });
    const seen: string[] = [];
    void (async () => {
      for await (const entry of watch) seen.push(`${entry.key}=${entry.value}`);
    })();
    await bus.putValue("RESPONSES", "cmVzcF8x", "run-1");
    expect((await kv.get("cmVzcF8x"))?.value).toBe("run-1");
    await bus.putValue("RESPONSES", "cmVzcF8x", "run-2");
    expect((await kv.get("cmVzcF8x"))?.value).toBe("run-2");
    await waitFor(() => seen.length === 2);
    expect(seen).toEqual(["cmVzcF8x=run-1", "cmVzcF8x=run-2"]);
    watch.stop();
  });

  it("rejects a put to a bucket that does not exist", async () => {
    // Nothing in this test's prefix has opened (so made) the bucket yet.
    await expect(bus.putValue("RATE_SLICES", "k", "v")).rejects.toThrow(/RATE_SLICES/);
  });
});
