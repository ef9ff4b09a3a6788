import { Envelope } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import { decodeEnvelope, encodeEnvelope, envelopeToJson, makeEnvelope, SCHEMA_VERSIONS } from "./envelope.js";
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
    expect(back.schemaVersion).toBe(SCHEMA_VERSIONS.StepStarted);
  });

  it("refuses bytes that are not an envelope", () => {
    expect(() => decodeEnvelope(new Uint8Array([0xff, 0xff, 0xff]))).toThrow(EventDecodeError);
  });

  it("reads an event type it does not know as unknown, keeping its place and identity", () => {
    const env = makeEnvelope({ id: "e9", runId: "r", sequence: 4, timestampMs: 1, tag: "t", payload });
    // A later version's type: the payload field number is one this version has no case for.
    const bytes = Buffer.concat([
      Buffer.from(encodeEnvelope({ ...env, type: "RunHeld", payload: undefined })),
      Buffer.from([0xfa, 0x07, 0x00]), // field 127, length-delimited, empty
    ]);
    expect(decodeEnvelope(bytes)).toEqual({
      id: "e9",
      type: "RunHeld",
      schemaVersion: 1,
      runId: "r",
      sequence: 4,
      timestampMs: 1,
      tag: "t",
      tenant: "",
      payload: undefined,
      unknown: "type",
    });
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
