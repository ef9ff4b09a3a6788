import { StepCompleted, StepStarted } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import { type EventPayload, encodeEnvelope, makeEnvelope } from "./envelope.js";
import { decodeStored, outOfSequence, quarantinePreview } from "./quarantine.js";
import { subjects as subjectsFor } from "./subjects.js";

// What a reader of the log makes of each message: an event, or one set aside with why.
// None of these throws: a reader that threw on one message would stop on it for good.

const subjects = subjectsFor("hf");
const started: EventPayload = {
  $case: "stepStarted",
  value: StepStarted.fromPartial({ stepId: "s1", step: 1 }),
};
const completed = (usage: { inputTokens: number }): EventPayload => ({
  $case: "stepCompleted",
  value: StepCompleted.fromPartial({
    outcome: { stepId: "s1", step: 1, usage: { reported: true, ...usage, outputTokens: 1 } },
  }),
});
const event = (payload: EventPayload, fields: { runId?: string; timestampMs?: number } = {}) =>
  makeEnvelope({
    id: "e1",
    runId: fields.runId ?? "run-1",
    sequence: 1,
    timestampMs: fields.timestampMs ?? 1_764_000_000_000,
    tag: "t",
    payload,
  });

const at = (subject: string, data: Uint8Array) => decodeStored(subjects, { seq: 42, subject, data });

describe("decodeStored", () => {
  it("reads an event stored on its own run's subject", () => {
    const read = at("hf.run.run-1.StepStarted", encodeEnvelope(event(started)));
    expect(read.quarantined).toBeUndefined();
    expect(read.envelope).toMatchObject({ id: "e1", type: "StepStarted", runId: "run-1", sequence: 1 });
  });

  it("sets garbage bytes aside with their place, the run and type its subject names, and the bytes", () => {
    const garbage = new Uint8Array([0xff, 0xff, 0xff, 0x00, 0x13]);
    expect(at("hf.run.run-1.StepCompleted", garbage)).toEqual({
      quarantined: {
        streamSequence: 42,
        subject: "hf.run.run-1.StepCompleted",
        runId: "run-1",
        type: "StepCompleted",
        reason: "undecodable",
        detail: expect.stringMatching(/^event is not a valid protobuf Envelope: /),
        data: garbage,
      },
    });
  });

  it("sets aside an envelope with no id, type or sequence", () => {
    expect(at("hf.run.run-1.StepStarted", new Uint8Array()).quarantined).toMatchObject({
      reason: "invalid_envelope",
    });
  });

  it("sets aside an envelope whose type disagrees with its payload", () => {
    const lying = { ...event(started), type: "StepCompleted" };
    expect(at("hf.run.run-1.StepCompleted", encodeEnvelope(lying)).quarantined).toMatchObject({
      reason: "type_mismatch",
      detail: 'event "e1" says type "StepCompleted" but carries StepStarted',
    });
  });

  it("sets aside a StepCompleted holding an int64 beyond 2^53, saying it is out of range", () => {
    const bytes = encodeEnvelope(event(completed({ inputTokens: 2 ** 60 })));
    expect(at("hf.run.run-1.StepCompleted", bytes).quarantined).toMatchObject({
      reason: "out_of_range",
      detail: expect.stringMatching(/integer beyond 2\^53 - 1: Value is larger than Number.MAX_SAFE_INTEGER/),
    });
    // The largest a number holds exactly still reads.
    const largest = encodeEnvelope(event(completed({ inputTokens: Number.MAX_SAFE_INTEGER })));
    expect(at("hf.run.run-1.StepCompleted", largest).envelope).toBeDefined();
  });

  it("sets aside an event whose timestamp no date can hold (every reader that shows or buckets it would throw)", () => {
    const bytes = encodeEnvelope(event(started, { timestampMs: 2 ** 53 - 1 }));
    expect(at("hf.run.run-1.StepStarted", bytes).quarantined).toMatchObject({ reason: "out_of_range" });
  });

  it("sets aside an envelope claiming another type than its subject (which NATS permissions check)", () => {
    const bytes = encodeEnvelope(event(started));
    expect(at("hf.run.run-1.RunResumed", bytes).quarantined).toMatchObject({
      reason: "wrong_subject",
      type: "RunResumed",
      detail: 'event says type "StepStarted" but was stored on a RunResumed subject',
    });
  });

  it("sets aside an envelope claiming another run than its subject, an alias token of its own run included", () => {
    const other = encodeEnvelope(event(started, { runId: "run-2" }));
    expect(at("hf.run.run-1.StepStarted", other).quarantined).toMatchObject({ reason: "wrong_subject" });
    // "_" + base64url("abc") decodes to "abc", but "abc"'s events are on "hf.run.abc.*": a
    // reader of run abc never reads this subject, so the event is not abc's.
    const aliased = encodeEnvelope(event(started, { runId: "abc" }));
    expect(at("hf.run._YWJj.StepStarted", aliased).quarantined).toMatchObject({
      reason: "wrong_subject",
      runId: "abc",
    });
    expect(at("hf.run.abc.StepStarted", aliased).envelope).toBeDefined();
  });

  it("reads an event of a run whose id no run may have today (stored before the rule), on that id's subject", () => {
    const id = "before\u0007rules";
    const token = `_${Buffer.from(id, "utf8").toString("base64url")}`;
    const bytes = encodeEnvelope(event(started, { runId: id }));
    expect(at(`hf.run.${token}.StepStarted`, bytes).envelope).toMatchObject({ runId: id });
  });

  it("sets aside a message on a subject that is no event's", () => {
    const bytes = encodeEnvelope(event(started));
    expect(at("hf.run.run-1.extra.StepStarted", bytes).quarantined).toMatchObject({
      reason: "wrong_subject",
      runId: "",
      type: "",
    });
  });

  it("keeps an event of a type this version does not know: it is no quarantine", () => {
    const bytes = Buffer.concat([
      Buffer.from(encodeEnvelope({ ...event(started), type: "RunTeleported", payload: undefined })),
      Buffer.from([0xfa, 0x07, 0x00]),
    ]);
    expect(at("hf.run.run-1.RunTeleported", bytes).envelope).toMatchObject({ unknown: "type" });
  });

  it("bounds what it quotes of an event's claims", () => {
    const long = { ...event(started), type: "X".repeat(10_000) };
    const read = at(`hf.run.run-1.${"Y".repeat(5)}`, encodeEnvelope(long));
    expect(read.quarantined?.detail.length).toBeLessThan(500);
  });
});

describe("outOfSequence", () => {
  it("says where the run's next sequence was, and keeps the event's bytes", () => {
    const jumped = { ...event(started), sequence: 1_000 };
    const set = outOfSequence(jumped, { streamSequence: 9, subject: "hf.run.run-1.StepStarted" }, 5);
    expect(set).toMatchObject({
      streamSequence: 9,
      runId: "run-1",
      type: "StepStarted",
      reason: "out_of_sequence",
      detail: "run sequence 1000 where 6 was next",
    });
    expect(decodeStored(subjects, { seq: 9, subject: set.subject, data: set.data }).envelope).toMatchObject({
      sequence: 1_000,
    });
  });
});

describe("quarantinePreview", () => {
  it("shows the first bytes in hex, and that there are more", () => {
    expect(quarantinePreview(new Uint8Array([0xde, 0xad]))).toBe("dead");
    expect(quarantinePreview(new Uint8Array(30).fill(0xab))).toBe(`${"ab".repeat(24)}…`);
  });
});
