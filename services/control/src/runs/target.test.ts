import { emptySelector } from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "../errors.js";
import { limitsFrom, listQuery, ruleIdFor, runAction, selectorAction } from "./target.js";

describe("an action by run id", () => {
  it("takes the run from the path and the reason from the body", () => {
    expect(runAction("agent 7/β", { reason: "look first" }, false)).toEqual({
      target: { runId: "agent 7/β" },
      reason: "look first",
      limits: undefined,
    });
    expect(runAction("a", undefined, false).reason).toBe("");
  });

  it("turns a resume's cost in USD into nano-USD, and steps and minutes as given", () => {
    expect(runAction("a", { steps: 10, cost: 0.25, minutes: 30 }, true).limits).toEqual({
      maxSteps: 10,
      maxCostNanoUsd: 250_000_000,
      maxMinutes: 30,
      maxTokensPerMinute: 0,
    });
  });

  it("refuses run ids no run can have, limits on a hold, and fields it does not know", () => {
    expect(() => runAction("", {}, false)).toThrow(/run id is empty/);
    expect(() => runAction("a\u0007", {}, false)).toThrow(/control character/);
    expect(() => runAction("a", { steps: 3 }, false)).toThrow(/unknown field "steps"/);
    expect(() => runAction("a", { resaon: "typo" }, false)).toThrow(InvalidArgumentError);
  });
});

describe("an action by selector", () => {
  it("reads every selector field", () => {
    const action = selectorAction(
      { run: "agent-*", tag: "prod", model: "gpt-4o", prompt: "a1b2", status: "running", reason: "incident" },
      false,
    );
    expect(action.target).toEqual({
      selector: {
        runGlob: "agent-*",
        tag: "prod",
        modelPrefix: "gpt-4o",
        promptHash: "a1b2",
        status: "running",
        all: false,
      },
    });
    expect(action.reason).toBe("incident");
  });

  it("refuses an empty selector unless it says all", () => {
    expect(() => selectorAction({ reason: "oops" }, false)).toThrow(/at least one of/);
    expect(selectorAction({ all: true }, false).target).toEqual({
      selector: { ...emptySelector(), all: true },
    });
  });

  it("names what is wrong: a status, a prompt, a type, a field", () => {
    expect(() => selectorAction({ status: "asleep" }, false)).toThrow(/status must be one of/);
    expect(() => selectorAction({ prompt: "xyz!" }, false)).toThrow(/hex prefix/);
    expect(() => selectorAction({ tag: 7 }, false)).toThrow(/tag must be a string/);
    expect(() => selectorAction({ all: "yes" }, false)).toThrow(/all must be true or false/);
    expect(() => selectorAction({ tags: "prod" }, false)).toThrow(/unknown field "tags"/);
    expect(() => selectorAction([], false)).toThrow(/JSON object/);
  });
});

describe("a resume's limits", () => {
  it("are none when none is given", () => {
    expect(limitsFrom({})).toBeUndefined();
  });

  it("must be positive, and steps and minutes whole", () => {
    expect(() => limitsFrom({ steps: 0 })).toThrow(/steps must be a positive integer/);
    expect(() => limitsFrom({ steps: 1.5 })).toThrow(/steps/);
    expect(() => limitsFrom({ costUsd: -1 })).toThrow(/cost must be a positive number/);
    expect(() => limitsFrom({ minutes: 0.5 })).toThrow(/minutes must be a positive integer/);
  });
});

describe("listing runs", () => {
  it("defaults to 100 runs of any status", () => {
    expect(listQuery({})).toEqual({ status: undefined, limit: 100 });
    expect(listQuery({ status: "held", limit: "5" })).toEqual({ status: "held", limit: 5 });
  });

  it("refuses an unknown status or a limit out of range", () => {
    expect(() => listQuery({ status: "paused" })).toThrow(
      /status must be one of running, idle, held, stopped/,
    );
    expect(() => listQuery({ limit: "0" })).toThrow(/limit must be an integer from 1 to 10000/);
    expect(() => listQuery({ limit: "lots" })).toThrow(/limit/);
  });
});

describe("a standing rule's id", () => {
  it("is the same for the same selector and differs for another", () => {
    const prod = { ...emptySelector(), tag: "prod" };
    expect(ruleIdFor(prod)).toBe(ruleIdFor({ ...emptySelector(), tag: "prod" }));
    expect(ruleIdFor(prod)).toMatch(/^rule-[0-9a-f]{12}$/);
    expect(ruleIdFor(prod)).not.toBe(ruleIdFor({ ...emptySelector(), tag: "prod", modelPrefix: "gpt" }));
    expect(ruleIdFor(prod)).not.toBe(ruleIdFor({ ...emptySelector(), runGlob: "prod" }));
  });
});
