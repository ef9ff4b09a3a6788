import { FailureReason } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import { boundText, EVENT_BOUNDS, MAX_OUTCOME_EVENT_BYTES } from "./bounds.js";
import { encodeEnvelope, makeEnvelope } from "./envelope.js";
import { decide } from "./run/decide.js";
import { complete, fail, given, history, NOW, observed, RUN, started } from "./run/spec.fixture.js";
import { foldRun } from "./run/state.js";
import { MAX_RUN_ID_LENGTH, MAX_TAG_LENGTH } from "./subjects.js";

// "€" is three bytes of UTF-8 in one UTF-16 unit: the most bytes a character bound allows.
const WIDE = "€";

describe("boundText", () => {
  it("leaves text within its bound as it is", () => {
    expect(boundText("chatcmpl-1", 256)).toBe("chatcmpl-1");
    expect(boundText("x".repeat(256), 256)).toBe("x".repeat(256));
  });

  it("cuts longer text to the bound, ending in an ellipsis a reader sees", () => {
    const cut = boundText("x".repeat(2_000_000), 256);
    expect(cut).toHaveLength(256);
    expect(cut.endsWith("…")).toBe(true);
    expect(cut.startsWith("x".repeat(255))).toBe(true);
  });

  it("never cuts a surrogate pair in half", () => {
    // Each "😀" is two UTF-16 units; a cut at an odd length would leave half of one.
    const cut = boundText("😀".repeat(10), 6);
    expect(cut).toBe("😀😀…");
    expect(() => encodeURIComponent(cut)).not.toThrow();
  });
});

describe("a step's outcome is held to its bounds where it becomes an event", () => {
  const decided = (command: Parameters<typeof decide>[0]) =>
    decide(command, foldRun(RUN, history(started("s1"))), NOW);

  it("records an answer within every bound as it came, not marked truncated", () => {
    const [event] = decided({ ...complete("s1"), toolCalls: ["search", "fetch"] });
    expect(event?.$case).toBe("stepCompleted");
    if (event?.$case !== "stepCompleted") return;
    expect(event.value.outcome?.responseId).toBe("chatcmpl-1");
    expect(event.value.outcome?.model).toBe("gpt-4o-mini-2024-07-18");
    expect(event.value.toolCalls).toEqual(["search", "fetch"]);
    expect(event.value.toolCallsOmitted).toBe(0);
    expect(event.value.outcome?.truncated).toBe(false);
  });

  it("cuts a 2 MB response id and lists 128 of 20,000 tool calls, saying how many more there were", () => {
    const [event] = decided({
      ...complete("s1", observed([10, 5], 700, { responseId: `chatcmpl-${"x".repeat(2_000_000)}` })),
      finishReason: "tool_calls",
      toolCalls: Array.from({ length: 20_000 }, (_, i) => `tool_${"n".repeat(60)}_${i}`),
      toolCallsSignature: "sig",
    });
    if (event?.$case !== "stepCompleted") throw new Error(`expected stepCompleted, got ${event?.$case}`);
    const { outcome, toolCalls, toolCallsOmitted, toolCallsSignature } = event.value;
    expect(outcome?.responseId).toHaveLength(EVENT_BOUNDS.responseIdChars);
    expect(outcome?.responseId.endsWith("…")).toBe(true);
    expect(toolCalls).toHaveLength(EVENT_BOUNDS.toolCallsListed);
    expect(toolCalls[0]).toBe(`tool_${"n".repeat(60)}_0`);
    expect(toolCallsOmitted).toBe(20_000 - EVENT_BOUNDS.toolCallsListed);
    expect(toolCallsSignature).toBe("sig");
    expect(outcome?.truncated).toBe(true);
    // Usage and cost are the answer's, cut or not.
    expect(outcome?.usage?.inputTokens).toBe(10);
    expect(outcome?.cost?.nanoUsd).toBe(700);
  });

  it("cuts a provider's error type, code and message", () => {
    const [event] = decided({
      ...fail("s1"),
      errorType: "t".repeat(5_000),
      errorCode: "c".repeat(5_000),
      errorMessage: "m".repeat(5_000_000),
    });
    if (event?.$case !== "stepFailed") throw new Error(`expected stepFailed, got ${event?.$case}`);
    expect(event.value.errorType).toHaveLength(EVENT_BOUNDS.errorLabelChars);
    expect(event.value.errorCode).toHaveLength(EVENT_BOUNDS.errorLabelChars);
    expect(event.value.errorMessage).toHaveLength(EVENT_BOUNDS.errorMessageChars);
    expect(event.value.reason).toBe(FailureReason.FAILURE_REASON_UPSTREAM_STATUS);
    expect(event.value.outcome?.truncated).toBe(true);
  });

  it("keeps the count of tool calls an abridged outcome left out", () => {
    given(started("s1"))
      .when({
        ...complete("s1", observed([10, 5], 700, { model: "", responseId: "", abridged: true })),
        toolCalls: [],
        toolCallsSignature: "sig",
        toolCallsOmitted: 3,
      })
      .then({
        $case: "stepCompleted",
        value: expect.objectContaining({
          toolCalls: [],
          toolCallsOmitted: 3,
          toolCallsSignature: "sig",
          outcome: expect.objectContaining({ abridged: true, truncated: true, model: "gpt-4o-mini" }),
        }),
      });
  });

  it(`makes no outcome event over ${MAX_OUTCOME_EVENT_BYTES / 1024} KiB, whatever the provider sends`, () => {
    const huge = WIDE.repeat(3_000_000);
    const outcome = observed([10, 5], 700, { model: huge, responseId: huge, usageProblem: huge });
    const completed = decided({
      ...complete("s1", outcome),
      finishReason: huge,
      toolCalls: Array.from({ length: 20_000 }, () => WIDE.repeat(10_000)),
      toolCallsSignature: "f".repeat(64),
    });
    const failed = decided({ ...fail("s1", outcome), errorType: huge, errorCode: huge, errorMessage: huge });
    for (const payload of [...completed, ...failed]) {
      const bytes = encodeEnvelope(
        makeEnvelope({
          id: "0190f6b0-0000-7000-8000-000000000000",
          runId: WIDE.repeat(MAX_RUN_ID_LENGTH),
          sequence: Number.MAX_SAFE_INTEGER,
          timestampMs: NOW,
          tag: WIDE.repeat(MAX_TAG_LENGTH),
          tenant: WIDE.repeat(MAX_TAG_LENGTH),
          payload,
        }),
      ).length;
      expect(bytes, payload.$case).toBeLessThan(MAX_OUTCOME_EVENT_BYTES);
    }
  });
});
