import { describe, expect, it } from "vitest";
import { actionRequest, describeAnswer } from "./act.js";
import { CliError } from "./errors.js";

describe("holdfast hold|resume|stop arguments", () => {
  it("acts on one run by id, escaped in the path", () => {
    expect(actionRequest("hold", ["agent 7/x", "--reason", "looks stuck"])).toMatchObject({
      path: "/runs/agent%207%2Fx/hold",
      body: { reason: "looks stuck" },
      byRun: true,
    });
  });

  it("sends a selector's flags as the body", () => {
    expect(
      actionRequest("stop", [
        "--run",
        "agent-*",
        "--tag",
        "prod",
        "--model",
        "gpt-4o",
        "--prompt",
        "ab12",
        "--status",
        "running",
      ]),
    ).toMatchObject({
      path: "/stop",
      body: { run: "agent-*", tag: "prod", model: "gpt-4o", prompt: "ab12", status: "running" },
      byRun: false,
    });
    expect(actionRequest("hold", ["--all"]).body).toEqual({ all: true });
  });

  it("gives a resume its limits as numbers, cost in USD", () => {
    expect(actionRequest("resume", ["r1", "--steps", "20", "--cost", "0.5", "--minutes", "15"]).body).toEqual(
      {
        steps: 20,
        cost: 0.5,
        minutes: 15,
      },
    );
  });

  it("asks a resume to compact the run's conversation", () => {
    expect(actionRequest("resume", ["r1", "--compact", "summarize"]).body).toEqual({ compact: "summarize" });
  });

  it("refuses what cannot be meant, with exit code 2", () => {
    const refused = (action: "hold" | "resume" | "stop", argv: string[]) => {
      try {
        actionRequest(action, argv);
      } catch (error) {
        expect(error).toBeInstanceOf(CliError);
        return { message: (error as CliError).message, code: (error as CliError).exitCode };
      }
      throw new Error("accepted");
    };
    expect(refused("hold", [])).toMatchObject({
      code: 2,
      message: expect.stringMatching(/give a run id, or a selector/),
    });
    expect(refused("hold", ["r1", "--tag", "x"]).message).toMatch(/not both/);
    expect(refused("hold", ["r1", "r2"]).message).toMatch(/at most one run id/);
    expect(refused("stop", ["r1", "--steps", "3"]).message).toMatch(/--steps is for resume only/);
    expect(refused("resume", ["r1", "--cost", "lots"]).message).toMatch(/--cost must be a number/);
    expect(refused("resume", ["r1", "--compact", "shrink"]).message).toMatch(
      /--compact must be summarize or truncate/,
    );
    expect(refused("hold", ["r1", "--compact", "truncate"]).message).toMatch(/--compact is for resume only/);
  });
});

describe("what an action says it did", () => {
  it("names the run, or says nothing changed", () => {
    const byRun = { byRun: true, body: {} };
    expect(describeAnswer("hold", byRun, { runs: [{ run_id: "r1", changed: true, status: "held" }] })).toBe(
      "Held run r1 (now held).",
    );
    expect(
      describeAnswer("stop", byRun, { runs: [{ run_id: "r1", changed: false, status: "stopped" }] }),
    ).toBe("Run r1 was already stopped: nothing changed.");
  });

  it("lists the runs a selector matched and the standing rule, with how to lift it", () => {
    const text = describeAnswer(
      "hold",
      { byRun: false, body: { tag: "prod" } },
      {
        runs: [
          { run_id: "a", changed: true, status: "held" },
          { run_id: "b", changed: false, status: "held" },
        ],
        rule: { rule_id: "rule-abc", description: "--tag prod", reason: "", actor: "", added_at: "" },
        rule_created: true,
      },
    );
    expect(text).toContain("Held 1 run; 1 already as asked.");
    expect(text).toMatch(/a\s+held\s+yes/);
    expect(text).toContain("Standing rule rule-abc (--tag prod)");
    expect(text).toMatch(/resume --tag prod`.*lift rule-abc`/);
  });

  it("says when nothing matched, and which rules a resume lifted", () => {
    const text = describeAnswer(
      "resume",
      { byRun: false, body: { tag: "prod" } },
      {
        runs: [],
        lifted_rules: [
          { rule_id: "rule-abc", description: "--tag prod", reason: "", actor: "", added_at: "" },
        ],
      },
    );
    expect(text).toBe("No held or stopped run matches.\n\nLifted standing rule rule-abc (--tag prod).");
  });
});
