import { type Config, type DeepPartial, loadConfig } from "@holdfast/config";
import { initialState } from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { ToolGate } from "./gate.js";
import { ArgumentRedactor } from "./redact.js";
import { ToolGateRules } from "./rules.js";
import { toolCallsSignature } from "./signature.js";

const call = (name: string, args: unknown = {}, id = "call_1") => ({
  id,
  name,
  arguments: typeof args === "string" ? args : JSON.stringify(args),
});

// A bare glob is a rule too: the configuration file's own spelling, before it is parsed.
type GateOverrides = DeepPartial<Omit<Config, "tool_gate" | "tool_gate_by_tag">> & Record<string, unknown>;

const rules = (config: GateOverrides) =>
  new ToolGateRules(loadConfig({ env: {}, overrides: config as DeepPartial<Config> }));

describe("tool-gate rules", () => {
  it("match a tool's name by glob, and name the rule that matched", () => {
    const gate = rules({ tool_gate: { deny: ["delete_*", "drop_table"] } });
    expect(gate.match("", [call("read_file")])).toBeUndefined();
    const matched = gate.match("", [call("read_file"), call("delete_repo", { name: "x" }, "call_2")]);
    expect(matched).toMatchObject({
      toolCall: { id: "call_2", name: "delete_repo" },
      rule: "tool_gate.deny[0]",
      ruleText: "delete_*",
      onMatch: "hold",
    });
    expect(gate.match("", [call("drop_table")])?.rule).toBe("tool_gate.deny[1]");
    expect(gate.match("", [call("drop_tables")])).toBeUndefined();
  });

  it('gate every tool with "*"', () => {
    const gate = rules({ tool_gate: { deny: ["*"], on_match: "stop" } });
    expect(gate.match("", [call("anything")])).toMatchObject({ rule: "tool_gate.deny[0]", onMatch: "stop" });
    expect(gate.match("", [])).toBeUndefined();
  });

  it("gate one recipient and let another through with a regex over the arguments as sent", () => {
    const gate = rules({
      tool_gate: { deny: [{ name: "send_email", args: "@(?!example\\.com)" }] },
    });
    expect(gate.match("", [call("send_email", { to: "ops@example.com" })])).toBeUndefined();
    const matched = gate.match("", [call("send_email", { to: "ceo@rival.io" })]);
    expect(matched?.ruleText).toBe("send_email, args /@(?!example\\.com)/u");
    // The regex reads the JSON text the model sent, spacing and all.
    expect(gate.match("", [call("send_email", '{"to": "x@evil.org"}')])).toBeDefined();
    expect(gate.match("", [call("post_email", { to: "ceo@rival.io" })])).toBeUndefined();
  });

  it("add a tag's rules to the fleet's, and let its on_match replace the fleet's", () => {
    const gate = rules({
      tool_gate: { deny: ["delete_*"] },
      tool_gate_by_tag: { prod: { deny: ["deploy"], on_match: "stop" } },
    });
    expect(gate.match("", [call("deploy")])).toBeUndefined();
    expect(gate.match("prod", [call("deploy")])).toMatchObject({
      rule: "tool_gate_by_tag.prod.deny[0]",
      onMatch: "stop",
    });
    expect(gate.match("prod", [call("delete_all")])).toMatchObject({
      rule: "tool_gate.deny[0]",
      onMatch: "stop",
    });
    expect(gate.match("staging", [call("delete_all")])?.onMatch).toBe("hold");
  });

  it("is empty when no rule is configured anywhere", () => {
    expect(rules({}).empty).toBe(true);
    expect(rules({ tool_gate_by_tag: { prod: { deny: ["x"] } } }).empty).toBe(false);
  });

  it("refuses a bad regex when the configuration loads, naming its key", () => {
    const bad = { tool_gate: { deny: ["ok", { name: "send", args: "(unclosed" }] } };
    expect(() => loadConfig({ env: {}, overrides: bad as DeepPartial<Config> })).toThrow(
      /tool_gate\.deny\.1\.args: expected a regular expression.*Unterminated group/,
    );
    expect(() => loadConfig({ env: {}, overrides: { redact: { patterns: ["[a-"] } } })).toThrow(
      /redact\.patterns\.0: expected a regular expression/,
    );
  });
});

describe("tool-call signatures", () => {
  it("compare arguments as parsed JSON, key order and spacing ignored", () => {
    const a = toolCallsSignature([call("search", '{"q":"x","page":{"n":1,"size":2}}')]);
    const b = toolCallsSignature([call("search", '{ "page": {"size": 2, "n": 1}, "q": "x" }', "call_9")]);
    expect(a).toBe(b);
    expect(toolCallsSignature([call("search", { q: "y" })])).not.toBe(
      toolCallsSignature([call("search", { q: "x" })]),
    );
    expect(toolCallsSignature([call("find", { q: "x" })])).not.toBe(
      toolCallsSignature([call("search", { q: "x" })]),
    );
    expect(toolCallsSignature([])).toBe("");
  });
});

describe("recorded arguments", () => {
  it("are scrubbed of credentials and configured patterns, and cut to a bounded length", () => {
    const redactor = new ArgumentRedactor(["\\b\\d{3}-\\d{2}-\\d{4}\\b"]);
    const recorded = redactor.redact(
      call("pay", { ssn: "123-45-6789", key: "sk-proj-abcdefghijklmnop1234", note: "hi" }),
      [],
    );
    expect(recorded.arguments).toBe('{"ssn":"[redacted]","key":"[redacted]","note":"hi"}');
    const long = redactor.redact(call("write", { text: "x".repeat(10_000) }), []);
    expect(long.argumentsTruncated).toBe(true);
    expect(long.arguments.length).toBe(4_096);
  });
});

describe("the gate's judgement of an answer", () => {
  const gate = (overrides: GateOverrides) =>
    new ToolGate(loadConfig({ env: {}, overrides: overrides as DeepPartial<Config> }));
  const answer = (stepId: string, calls: ReturnType<typeof call>[]) => ({
    runId: "r",
    tag: "",
    stepId,
    toolCalls: calls,
    signature: toolCallsSignature(calls),
  });
  const search = [call("search", { q: "x" })];

  it("holds the Nth answer in a row with the same calls, counting its own answers before the log has them", () => {
    const loops = gate({ max_repeated_tool_calls: 3 });
    // The previous answers' outcomes are still on their way: their steps are open in the fold.
    const state = (open: string[]) => ({
      ...initialState("r"),
      open: new Map(open.map((id) => [id, {} as never])),
    });
    expect(loops.judge(answer("s1", search), state(["s1"]))).toBeUndefined();
    expect(loops.judge(answer("s2", search), state(["s1", "s2"]))).toBeUndefined();
    expect(loops.judge(answer("s3", search), state(["s1", "s2", "s3"]))).toMatchObject({
      kind: "loop",
      repeats: 3,
    });
  });

  it("reads the count from the log once it has the previous answer, and starts again after another call or none", () => {
    const loops = gate({ max_repeated_tool_calls: 2 });
    const signature = toolCallsSignature(search);
    const folded = { ...initialState("r"), repeat: { signature, count: 1, stepId: "s1" } };
    expect(loops.judge(answer("s2", search), folded)).toMatchObject({ kind: "loop", repeats: 2 });
    // After a decision the log's count is empty: the next one is the first again.
    const decided = { ...initialState("r"), repeat: { signature: "", count: 0, stepId: "" } };
    expect(loops.judge(answer("s3", search), decided)).toBeUndefined();
    expect(loops.judge(answer("s4", [call("fetch")]), undefined)).toBeUndefined();
    expect(loops.judge(answer("s5", []), undefined)).toBeUndefined();
  });

  it("prefers a rule to a loop, and records the hold with arguments redacted and the request by its hash", () => {
    const both = gate({
      tool_gate: { deny: ["search"] },
      max_repeated_tool_calls: 1,
      redact: { patterns: ["x"] },
    });
    const judged = answer("s1", search);
    const hold = both.judge(judged, undefined);
    expect(hold).toMatchObject({ kind: "gate", match: { rule: "tool_gate.deny[0]" } });
    const command = both.command(judged, hold!, {
      gateId: "g1",
      step: 4,
      api: 1,
      model: "m",
      stream: true,
      promptHash: "p",
      requestBody: Buffer.from("{}"),
      secrets: [],
      gateway: "gw",
    });
    expect(command).toMatchObject({
      type: "GateAnswer",
      gateId: "g1",
      stepId: "s1",
      step: 4,
      action: "hold",
      match: { kind: "gate", toolCall: { name: "search", arguments: '{"q":"[redacted]"}' } },
      requestHash: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    });
    expect(gate({}).off).toBe(true);
  });
});

describe("arguments spelled with JSON escapes", () => {
  it("do not hide a value from a rule's regex or from redaction", () => {
    const gate = rules({ tool_gate: { deny: [{ name: "send_email", args: '@(?!example\\.com")' }] } });
    expect(gate.match("", [call("send_email", '{"to":"ceo\\u0040rival.io"}')])).toBeDefined();
    expect(gate.match("", [call("send_email", '{"to":"ops\\u0040example.com"}')])).toBeUndefined();
    expect(gate.match("", [call("send_email", { to: "ceo@example.com.evil.io" })])).toBeDefined();
    const redactor = new ArgumentRedactor(["\\b\\d{3}-\\d{2}-\\d{4}\\b"]);
    expect(redactor.redact(call("pay", '{"ssn":"123\\u002d45\\u002d6789"}'), []).arguments).toBe(
      '{"ssn":"[redacted]"}',
    );
    // Without escapes the arguments are recorded as sent, duplicate keys and long numbers too.
    const sent = '{"to":"a@x.io","to":"b@x.io","amount":12345678901234567890}';
    expect(redactor.redact(call("pay", sent), []).arguments).toBe(sent);
  });
});
