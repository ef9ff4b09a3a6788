import { describe, expect, it } from "vitest";
import { compareVersions, formatVersion, parseVersion, satisfiesMinimum } from "./version.js";

describe("parseVersion", () => {
  it("reads the version out of `nats-server --version`", () => {
    expect(parseVersion("nats-server: v2.15.1\n")).toEqual({ major: 2, minor: 15, patch: 1 });
  });

  it("keeps a prerelease tag", () => {
    const version = parseVersion("nats-server: v2.12.0-RC.3");
    expect(version).toEqual({ major: 2, minor: 12, patch: 0, prerelease: "RC.3" });
    expect(version && formatVersion(version)).toBe("2.12.0-RC.3");
  });

  it("returns undefined when there is no version", () => {
    expect(parseVersion("command not found")).toBeUndefined();
    expect(parseVersion("")).toBeUndefined();
  });
});

describe("compareVersions", () => {
  const v = (text: string) => {
    const parsed = parseVersion(text);
    if (!parsed) throw new Error(`bad test version ${text}`);
    return parsed;
  };

  it("compares numerically, not as text", () => {
    expect(compareVersions(v("2.9.10"), v("2.10.0"))).toBe(-1);
    expect(compareVersions(v("2.10.0"), v("2.9.10"))).toBe(1);
    expect(compareVersions(v("10.0.0"), v("9.99.99"))).toBe(1);
  });

  it("sorts a prerelease before its release", () => {
    expect(compareVersions(v("2.11.0-RC.1"), v("2.11.0"))).toBe(-1);
    expect(compareVersions(v("2.11.0-RC.2"), v("2.11.0-RC.10"))).toBe(-1);
    expect(compareVersions(v("2.11.0-beta"), v("2.11.0-RC.1"))).toBe(1);
  });

  it("finds equal versions equal", () => {
    expect(compareVersions(v("v2.11.0"), v("2.11.0"))).toBe(0);
  });
});

describe("satisfiesMinimum", () => {
  it.each([
    ["2.15.1", true],
    ["2.11.0", true],
    ["3.0.0", true],
    ["2.10.99", false],
    ["2.9.10", false],
    ["2.11.0-RC.1", false],
    ["garbage", false],
  ])("%s against 2.11.0 → %s", (actual, expected) => {
    expect(satisfiesMinimum(actual, "2.11.0")).toBe(expected);
  });
});
