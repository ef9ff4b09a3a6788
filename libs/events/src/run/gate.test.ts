import { ActorKind, RunAction } from "@holdfast/proto";
import { describe, expect, it } from "vitest";
import type { EventPayload } from "../envelope.js";
import { NothingGatedError, RunGatedError } from "../errors.js";
import { decide, type GateAnswer } from "./decide.js";
import {
  complete,
  given,
  held,
  history,
  NOW,
  observed,
  operator,
  RUN,
  start,
  started,
  stopped,
} from "./spec.fixture.js";
import { foldRun, LOOP_RULE, RunStatus } from "./state.js";
import { describeRun } from "./view.js";

// The tool-call gate on the run, given/when/then: a held answer, its approval or denial,
// and the count of answers in a row that loop detection reads.

const send = {
  id: "call_1",
  name: "send_email",
  arguments: '{"to":"ceo@rival.io"}',
  argumentsTruncated: false,
};

const gate = (gateId: string, stepId: string, overrides: Partial<GateAnswer> = {}): GateAnswer => ({
  type: "GateAnswer",
  gateId,
  stepId,
  step: 1,
  api: start(stepId).api,
  model: "gpt-4o-mini",
  stream: false,
  toolCalls: [send],
  match: { kind: "gate", toolCall: send, rule: "tool_gate.deny[0]", ruleText: "send_email" },
  action: "hold",
  requestHash: "req",
  answerHash: "ans",
  promptHash: "abc123",
  gateway: "gw-1#a",
  ...overrides,
});

const completedWith = (stepId: string, signature: string): EventPayload => {
  const [event] = decide(
    { ...complete(stepId, observed([10, 5], 100)), toolCallsSignature: signature },
    foldRun(RUN, history(started(stepId))),
    NOW,
  );
  return event!;
};

/** The events a command decides on a run with this history. */
const after = (payloads: EventPayload[], command: Parameters<typeof decide>[0]) =>
  decide(command, foldRun(RUN, history(...payloads)), NOW);

describe("the tool-call gate holds an answer until an operator decides", () => {
  it("given a completed step, when its answer is gated, then ToolCallGated names the tool, the rule, the step and the request", () => {
    given(started("s1"), completedWith("s1", "sig"))
      .when(gate("g1", "s1"))
      .then({
        $case: "toolCallGated",
        value: {
          gateId: "g1",
          stepId: "s1",
          step: 1,
          api: start("s1").api,
          model: "gpt-4o-mini",
          stream: false,
          action: RunAction.RUN_ACTION_HOLD,
          requestHash: "req",
          answerHash: "ans",
          promptHash: "abc123",
          gateway: "gw-1#a",
          runStopped: false,
          toolCall: send,
          toolCalls: [send],
          toolCallsOmitted: 0,
          rule: "tool_gate.deny[0]",
          ruleText: "send_email",
          actor: { kind: ActorKind.ACTOR_KIND_GATE, name: "tool_gate.deny[0]" },
        },
      });
  });

  it("holds the run (or stops it, on_match: stop) while the answer waits, and a retried gate adds nothing", () => {
    const gated = after([started("s1"), completedWith("s1", "sig")], gate("g1", "s1"));
    const state = foldRun(RUN, history(started("s1"), completedWith("s1", "sig"), ...gated));
    expect(state.status).toBe(RunStatus.Held);
    expect(state.hold).toMatchObject({ kind: "gate", action: "hold", ruleId: "tool_gate.deny[0]" });
    expect([...state.gates.keys()]).toEqual(["g1"]);
    expect(decide(gate("g1", "s1"), state, NOW)).toEqual([]);

    const stopping = after([started("s1"), completedWith("s1", "sig")], gate("g1", "s1", { action: "stop" }));
    expect(foldRun(RUN, history(started("s1"), completedWith("s1", "sig"), ...stopping)).status).toBe(
      RunStatus.Stopped,
    );
  });

  it("approve lets the answer through and the run goes on; a second approval is an error the operator sees", () => {
    const base = [started("s1"), completedWith("s1", "sig")];
    const gated = [...base, ...after(base, gate("g1", "s1"))];
    const approved = after(gated, { type: "ApproveAnswer", actor: operator, reason: "fine" });
    expect(approved).toEqual([
      {
        $case: "toolCallApproved",
        value: { gateId: "g1", stepId: "s1", step: 1, actor: operator, reason: "fine" },
      },
    ]);
    const state = foldRun(RUN, history(...gated, ...approved));
    expect(state.status).toBe(RunStatus.Idle);
    expect(state.hold).toBeNull();
    expect(state.gateDecisions.get("g1")).toEqual({
      gateId: "g1",
      approved: true,
      abandoned: false,
      reason: "fine",
    });
    expect(() => decide({ type: "ApproveAnswer", actor: operator, reason: "" }, state, NOW)).toThrow(
      NothingGatedError,
    );
    // By gate id, an answer decided already is not decided twice.
    expect(decide({ type: "ApproveAnswer", actor: operator, reason: "", gateId: "g1" }, state, NOW)).toEqual(
      [],
    );
  });

  it("deny refuses the answer; the run goes on after a hold, and stays stopped after on_match: stop", () => {
    const base = [started("s1"), completedWith("s1", "sig")];
    for (const [action, status] of [
      ["hold", RunStatus.Idle],
      ["stop", RunStatus.Stopped],
    ] as const) {
      const gated = [...base, ...after(base, gate("g1", "s1", { action }))];
      const denied = after(gated, { type: "DenyAnswer", actor: operator, reason: "no" });
      expect(denied).toEqual([
        {
          $case: "toolCallDenied",
          value: {
            gateId: "g1",
            stepId: "s1",
            step: 1,
            actor: operator,
            reason: "no",
            runStopped: action === "stop",
          },
        },
      ]);
      const state = foldRun(RUN, history(...gated, ...denied));
      expect(state.status).toBe(status);
      expect(state.gateDecisions.get("g1")?.approved).toBe(false);
    }
  });

  it("a resume by id is refused while an answer is held (approve or deny it); by selector the run is left as it is", () => {
    const base = [started("s1"), completedWith("s1", "sig")];
    const state = foldRun(RUN, history(...base, ...after(base, gate("g1", "s1"))));
    const resume = { type: "ResumeRun", actor: operator, reason: "", onlyIfHeld: false } as const;
    expect(() => decide(resume, state, NOW)).toThrow(RunGatedError);
    expect(decide({ ...resume, onlyIfHeld: true }, state, NOW)).toEqual([]);
  });

  it("a stop refuses every held answer before it stops the run", () => {
    const base = [started("s1"), completedWith("s1", "sig")];
    const gated = [...base, ...after(base, gate("g1", "s1"))];
    const events = after(gated, { type: "StopRun", actor: operator, reason: "enough" });
    expect(events.map((e) => e.$case)).toEqual(["toolCallDenied", "runStopped"]);
    const state = foldRun(RUN, history(...gated, ...events));
    expect(state.status).toBe(RunStatus.Stopped);
    expect(state.gates.size).toBe(0);
  });

  it("a gate on a run an operator holds keeps the operator's hold when decided", () => {
    const base = [started("s1"), held, completedWith("s1", "sig")];
    const gated = [...base, ...after(base, gate("g1", "s1"))];
    const approved = after(gated, { type: "ApproveAnswer", actor: operator, reason: "" });
    const state = foldRun(RUN, history(...gated, ...approved));
    expect(state.status).toBe(RunStatus.Held);
    expect(state.hold?.kind).toBe("operator");
  });
});

describe("loop detection reads the answers in a row with the same tool calls", () => {
  it("counts equal signatures in a row, restarts on another or on none, and forgets after a decision", () => {
    const steps = [
      started("s1"),
      completedWith("s1", "A"),
      started("s2"),
      completedWith("s2", "A"),
      started("s3"),
      completedWith("s3", "A"),
    ];
    expect(foldRun(RUN, history(...steps)).repeat).toEqual({ signature: "A", count: 3, stepId: "s3" });
    expect(foldRun(RUN, history(...steps, started("s4"), completedWith("s4", "B"))).repeat.count).toBe(1);
    expect(foldRun(RUN, history(...steps, started("s4"), completedWith("s4", ""))).repeat.count).toBe(0);

    const loop = after(steps, {
      ...gate("g1", "s3", { step: 3 }),
      match: { kind: "loop", repeats: 3, maxRepeats: 3, signature: "A" },
    });
    expect(loop[0]).toMatchObject({
      $case: "loopDetected",
      value: { repeats: 3, maxRepeats: 3, toolCallsSignature: "A", actor: { name: LOOP_RULE } },
    });
    const approved = after([...steps, ...loop], { type: "ApproveAnswer", actor: operator, reason: "" });
    const state = foldRun(RUN, history(...steps, ...loop, ...approved));
    expect(state.repeat.count).toBe(0);
    expect(state.status).toBe(RunStatus.Idle);
  });

  it("shows what the model asked for, the rule and the decision in the run's view", () => {
    const base = [started("s1"), completedWith("s1", "sig")];
    const gated = [...base, ...after(base, gate("g1", "s1"))];
    const denied = after(gated, { type: "DenyAnswer", actor: operator, reason: "not that address" });
    const view = describeRun(RUN, history(...gated, ...denied));
    expect(view.gates).toEqual([
      expect.objectContaining({
        gateId: "g1",
        step: 1,
        kind: "gate",
        status: "denied",
        tool: "send_email",
        arguments: '{"to":"ceo@rival.io"}',
        rule: "tool_gate.deny[0]",
        decidedBy: "operator (control token)",
        decisionReason: "not that address",
      }),
    ]);
    expect(view.control.map((c) => c.what)).toEqual(["gated", "denied"]);
  });
});

describe("the gate beside other holds, and answers nobody takes", () => {
  const base = [started("s1"), completedWith("s1", "a"), started("s2"), completedWith("s2", "b")];

  it("an operator's hold placed while an answer is held outlasts the answer's approval", () => {
    const gated = [...base, ...after(base, gate("g1", "s1"))];
    const holding = after(gated, { type: "HoldRun", actor: operator, reason: "look" });
    expect(holding.map((e) => e.$case)).toEqual(["runHeld"]);
    const approved = after([...gated, ...holding], { type: "ApproveAnswer", actor: operator, reason: "" });
    const state = foldRun(RUN, history(...gated, ...holding, ...approved));
    expect(state.status).toBe(RunStatus.Held);
    expect(state.hold?.kind).toBe("operator");
    // Held by an operator already: a second hold adds nothing.
    expect(decide({ type: "HoldRun", actor: operator, reason: "" }, state, NOW)).toEqual([]);
  });

  it("a stop gate's denial keeps the run stopped when another held answer is approved after it", () => {
    const twice = [...base, ...after(base, gate("g1", "s1", { action: "stop" }))];
    const both = [...twice, ...after(twice, gate("g2", "s2", { step: 2, action: "stop" }))];
    const denied = after(both, { type: "DenyAnswer", actor: operator, reason: "no", gateId: "g1" });
    expect(foldRun(RUN, history(...both, ...denied)).status).toBe(RunStatus.Stopped);
    const approved = after([...both, ...denied], {
      type: "ApproveAnswer",
      actor: operator,
      reason: "",
      gateId: "g2",
    });
    const state = foldRun(RUN, history(...both, ...denied, ...approved));
    expect(state.status).toBe(RunStatus.Stopped);
    expect(state.hold).toMatchObject({
      kind: "operator",
      action: "stop",
      reason: "send_email (tool_gate.deny[0]) denied: no",
    });
  });

  it("an answer of a run stopped while it was in flight is refused at once, not left for an operator", () => {
    const events = after([...base, stopped], gate("g1", "s2", { step: 2 }));
    // One event, the gateway's own: the refusal is not written as an operator's denial.
    expect(events).toEqual([expect.objectContaining({ $case: "toolCallGated" })]);
    expect(events[0]).toMatchObject({ value: { gateId: "g1", runStopped: true } });
    const state = foldRun(RUN, history(...base, stopped, ...events));
    expect(state.gates.size).toBe(0);
    expect(state.gateDecisions.get("g1")).toMatchObject({ approved: false, reason: "the run is stopped" });
    expect(describeRun(RUN, history(...base, stopped, ...events)).gates[0]).toMatchObject({
      status: "denied",
      decisionReason: "the run is stopped",
    });
    expect(state.status).toBe(RunStatus.Stopped);
    expect(state.hold?.kind).toBe("operator");
    // Held by an operator (not stopped): the answer waits as usual.
    expect(after([...base, held], gate("g2", "s2")).map((e) => e.$case)).toEqual(["toolCallGated"]);
  });

  it("an answer whose client went away is abandoned: the run goes on, and the view says so", () => {
    const gated = [...base, ...after(base, gate("g1", "s1"))];
    const abandoned = after(gated, {
      type: "AbandonAnswer",
      gateId: "g1",
      why: "client_gone",
      gateway: "gw-1#a",
    });
    expect(abandoned).toEqual([
      {
        $case: "toolCallAbandoned",
        value: { gateId: "g1", stepId: "s1", step: 1, why: "client_gone", gateway: "gw-1#a" },
      },
    ]);
    const state = foldRun(RUN, history(...gated, ...abandoned));
    expect(state.status).toBe(RunStatus.Idle);
    expect(state.gateDecisions.get("g1")).toMatchObject({ approved: false, abandoned: true });
    expect(
      after([...gated, ...abandoned], {
        type: "AbandonAnswer",
        gateId: "g1",
        why: "client_gone",
        gateway: "",
      }),
    ).toEqual([]);
    expect(describeRun(RUN, history(...gated, ...abandoned)).gates[0]).toMatchObject({
      status: "abandoned",
      decisionReason: "client_gone",
    });
  });
});

describe("a stop gate's answers", () => {
  const base = [started("s1"), completedWith("s1", "a"), started("s2"), completedWith("s2", "b")];
  const stopGate = (gateId: string, stepId: string, step: number) =>
    gate(gateId, stepId, { step, action: "stop" });

  it("once one is denied and none is held, the run is stopped for good: a later answer is refused at once, and nothing undoes the stop", () => {
    const gated = [...base, ...after(base, stopGate("g1", "s1", 1))];
    const denied = [...gated, ...after(gated, { type: "DenyAnswer", actor: operator, reason: "no" })];
    expect(foldRun(RUN, history(...denied)).hold).toMatchObject({
      kind: "operator",
      action: "stop",
      reason: "send_email (tool_gate.deny[0]) denied: no",
    });
    // The other call was still in flight: its answer comes back asking for a gated tool.
    const late = after(denied, stopGate("g2", "s2", 2));
    expect(late).toEqual([
      expect.objectContaining({
        $case: "toolCallGated",
        value: expect.objectContaining({ runStopped: true }),
      }),
    ]);
    const state = foldRun(RUN, history(...denied, ...late));
    expect(state.status).toBe(RunStatus.Stopped);
    expect(state.gates.size).toBe(0);
  });

  it("an answer left with nobody to take it leaves the run stopped", () => {
    const gated = [...base, ...after(base, stopGate("g1", "s1", 1))];
    const abandoned = after(gated, {
      type: "AbandonAnswer",
      gateId: "g1",
      why: "client_gone",
      gateway: "gw",
    });
    const state = foldRun(RUN, history(...gated, ...abandoned));
    expect(state.status).toBe(RunStatus.Stopped);
    expect(state.hold?.reason).toContain("abandoned (client_gone)");
  });

  it("an operator's hold on a run only a held answer stops outlasts the answer's approval", () => {
    const gated = [...base, ...after(base, stopGate("g1", "s1", 1))];
    const holding = after(gated, { type: "HoldRun", actor: operator, reason: "look" });
    expect(holding.map((e) => e.$case)).toEqual(["runHeld"]);
    const approved = after([...gated, ...holding], { type: "ApproveAnswer", actor: operator, reason: "" });
    const state = foldRun(RUN, history(...gated, ...holding, ...approved));
    expect(state.status).toBe(RunStatus.Held);
    expect(state.hold?.kind).toBe("operator");
  });
});
