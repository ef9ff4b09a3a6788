import { makeEnvelope, StepRecorded, type StoredEnvelope } from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { fromEvents } from "./results.js";

const recorded = (sequence: number, label: string, resultJson: string): StoredEnvelope =>
  makeEnvelope({
    id: `e${sequence}`,
    runId: "durable-1",
    sequence,
    timestampMs: 1_764_000_000_000,
    tag: "",
    payload: {
      $case: "stepRecorded",
      value: StepRecorded.fromPartial({ lease: 1, label, ordinal: 1, attempt: 1, ok: true, resultJson }),
    },
  });

describe("the recorded steps a re-drive reuses", () => {
  it("are the run's own: a step recorded past a gap in its sequence is not reused, the run's next one is", () => {
    const results = fromEvents([
      recorded(1, "fetch", '"real"'),
      recorded(1_000, "summarize", '"forged"'),
      recorded(2, "summarize", '"real too"'),
    ]);
    expect([...results.steps.values()]).toEqual([
      { label: "fetch", ordinal: 1, resultJson: '"real"' },
      { label: "summarize", ordinal: 1, resultJson: '"real too"' },
    ]);
  });
});
