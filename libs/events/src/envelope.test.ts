import { Envelope } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import { decodeEnvelope, encodeEnvelope, envelopeToJson, makeEnvelope, SCHEMA_VERSION } from "./envelope.js";
import { EventDecodeError } from "./errors.js";

const payload = {
  $case: "stepStarted" as const,
  value: Envelope.fromPartial({
    payload: { $case: "stepStarted", value: { stepId: "s1", step: 1, model: "m" } },
  }).payload!.value as never,
};

describe("envelope", () => {
  it("round-trips through protobuf with type and schema version filled in", () => {
    const env = makeEnvelope({ id: "e1", runId: "r.1", sequence: 3, timestampMs: 42, tag: "t", payload });
    const back = decodeEnvelope(encodeEnvelope(env));
    expect(back).toEqual(env);
    expect(back.type).toBe("StepStarted");
    expect(back.schemaVersion).toBe(SCHEMA_VERSION);
  });

  it("refuses bytes that are not an envelope", () => {
    expect(() => decodeEnvelope(new Uint8Array([0xff, 0xff, 0xff]))).toThrow(EventDecodeError);
  });

  it("refuses an event from a newer schema instead of half-reading it", () => {
    const env = {
      ...makeEnvelope({ id: "e1", runId: "r", sequence: 1, timestampMs: 1, tag: "", payload }),
      schemaVersion: 99,
    };
    expect(() => decodeEnvelope(encodeEnvelope(env))).toThrow(/schema version 99/);
  });

  it("refuses an event whose type disagrees with its payload", () => {
    const env = {
      ...makeEnvelope({ id: "e1", runId: "r", sequence: 1, timestampMs: 1, tag: "", payload }),
      type: "StepFailed",
    };
    expect(() => decodeEnvelope(encodeEnvelope(env))).toThrow(/says type "StepFailed"/);
  });

  it("has a JSON form for people and tools", () => {
    const env = makeEnvelope({ id: "e1", runId: "r", sequence: 1, timestampMs: 1, tag: "", payload });
    expect(envelopeToJson(env)).toMatchObject({
      id: "e1",
      type: "StepStarted",
      stepStarted: { stepId: "s1" },
    });
  });
});
