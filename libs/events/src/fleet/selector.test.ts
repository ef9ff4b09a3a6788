import { describe, expect, it } from "vitest";
import { emptySelector } from "./rules.js";
import { describeSelector, matches, type RunAttributes, selectorProblem } from "./selector.js";

const run: RunAttributes = {
  runId: "agent-7/nightly",
  tag: "prod",
  model: "gpt-4o-mini",
  promptHash: "3f9a1c2b7d00aa11",
  status: "running",
};
const select = (fields: Partial<ReturnType<typeof emptySelector>>) => ({ ...emptySelector(), ...fields });

describe("selectors", () => {
  it.each([
    [{ runGlob: "agent-*" }, true],
    [{ runGlob: "agent-?/nightly" }, true],
    [{ runGlob: "agent-[0-9]*" }, true],
    [{ runGlob: "other-*" }, false],
    [{ tag: "prod" }, true],
    [{ tag: "pro" }, false],
    [{ modelPrefix: "gpt-4o" }, true],
    [{ modelPrefix: "gpt-4o-mini-2024" }, false],
    [{ promptHash: "3f9a" }, true],
    [{ promptHash: "3f9b" }, false],
    [{ status: "running" }, true],
    [{ status: "held" }, false],
    [{ tag: "prod", modelPrefix: "gpt-4o", runGlob: "agent-*" }, true],
    [{ tag: "prod", modelPrefix: "claude" }, false],
    [{ all: true }, true],
  ])("%o matches the run: %s", (fields, expected) => {
    expect(matches(select(fields), run)).toBe(expected);
  });

  it("refuses an empty selector unless it says all, and names a bad status or prompt", () => {
    expect(selectorProblem(emptySelector())).toMatch(/at least one/);
    expect(selectorProblem(select({ all: true }))).toBeUndefined();
    expect(selectorProblem(select({ status: "paused" }))).toMatch(/status must be one of/);
    expect(selectorProblem(select({ promptHash: "xyz" }))).toMatch(/hex prefix/);
  });

  it("reads back as the operator typed it", () => {
    expect(describeSelector(select({ tag: "prod", status: "held" }))).toBe("--tag prod --status held");
  });
});
