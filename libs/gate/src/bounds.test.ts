import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import {
  decide,
  EVENT_BOUNDS,
  encodeEnvelope,
  initialState,
  MAX_GATE_EVENT_BYTES,
  MAX_RUN_ID_LENGTH,
  makeEnvelope,
} from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { ToolGate } from "./gate.js";
import { toolCallsSignature } from "./signature.js";

// A provider decides how many tool calls an answer has and how long each one's id, name and
// arguments are; a gate's event records them for the operator who decides on the answer,
// so what it records is held to bounds the log always takes.

const WIDE = "€"; // three bytes of UTF-8 in one UTF-16 unit

const gate = (overrides: Record<string, unknown>) =>
  new ToolGate(loadConfig({ env: {}, overrides: overrides as DeepPartial<Config> }));

const held = {
  gateId: "g1",
  step: 1,
  api: 1,
  model: "gpt-4o-mini",
  stream: false,
  promptHash: "p",
  requestBody: Buffer.from("{}"),
  secrets: [],
  gateway: "gw",
};

function answerOf(toolCalls: { id: string; name: string; arguments: string }[]) {
  return { runId: "r", tag: "", stepId: "s1", toolCalls, signature: toolCallsSignature(toolCalls) };
}

describe("a gate's event about an answer with many tool calls", () => {
  const many = Array.from({ length: 20_000 }, (_, i) => ({
    id: `call_${i}`,
    name: i === 19_999 ? "send_email" : `read_${i}`,
    arguments: "{}",
  }));

  it("records the first calls, the matched one always among them, and how many more there were", () => {
    const rules = gate({ tool_gate: { deny: ["send_email"] } });
    const answer = answerOf(many);
    const hold = rules.judge(answer, undefined);
    expect(hold).toMatchObject({ kind: "gate", match: { rule: "tool_gate.deny[0]" } });
    const command = rules.command(answer, hold!, held);
    expect(command.toolCalls).toHaveLength(EVENT_BOUNDS.toolCallsGated);
    expect(command.toolCalls[0]?.name).toBe("read_0");
    expect(command.toolCalls.at(-1)?.name).toBe("send_email");
    expect(command.match).toMatchObject({ kind: "gate", toolCall: { id: "call_19999", name: "send_email" } });
    expect(command.toolCallsOmitted).toBe(20_000 - EVENT_BOUNDS.toolCallsGated);
  });

  it(`makes no event over ${MAX_GATE_EVENT_BYTES / 1024} KiB, whatever the calls' ids, names and arguments`, () => {
    // Every call the event could record at its longest, and thousands more.
    const long = WIDE.repeat(100_000);
    const huge = Array.from({ length: 20_000 }, (_, i) =>
      i < 2 * EVENT_BOUNDS.toolCallsGated
        ? { id: long, name: `send_${long}`, arguments: JSON.stringify({ text: long }) }
        : { id: `call_${i}`, name: `send_${i}`, arguments: "{}" },
    );
    for (const overrides of [{ tool_gate: { deny: ["send_*"] } }, { max_repeated_tool_calls: 1 }]) {
      const rules = gate(overrides);
      const answer = answerOf(huge);
      const hold = rules.judge(answer, undefined);
      expect(hold).toBeDefined();
      const command = rules.command(answer, hold!, held);
      const state = { ...initialState("r"), lastSequence: 1 };
      const [payload] = decide(command, state, 0);
      expect(payload).toBeDefined();
      const bytes = encodeEnvelope(
        makeEnvelope({
          id: "0190f6b0-0000-7000-8000-000000000000",
          runId: WIDE.repeat(MAX_RUN_ID_LENGTH),
          sequence: 2,
          timestampMs: 0,
          tag: "t",
          payload: payload!,
        }),
      ).length;
      expect(bytes, payload!.$case).toBeLessThan(MAX_GATE_EVENT_BYTES);
    }
  });
});
