import { describe, expect, it } from "vitest";
import { jsonDepthExceeds } from "./depth.js";

const nested = (levels: number, open = "[", close = "]") =>
  JSON.parse(open.repeat(levels) + close.repeat(levels)) as unknown;

describe("jsonDepthExceeds", () => {
  it("counts a top-level object or array as one level, and scalars as none", () => {
    expect(jsonDepthExceeds("text", 0)).toBe(false);
    expect(jsonDepthExceeds(null, 0)).toBe(false);
    expect(jsonDepthExceeds({}, 0)).toBe(true);
    expect(jsonDepthExceeds({}, 1)).toBe(false);
    expect(jsonDepthExceeds({ a: [1, { b: "c" }] }, 3)).toBe(false);
    expect(jsonDepthExceeds({ a: [1, { b: "c" }] }, 2)).toBe(true);
  });

  it("finds the one deep branch among shallow ones, in arrays and objects", () => {
    const body = { model: "m", messages: [{ role: "user", content: "hi" }], tools: [nested(10)] };
    expect(jsonDepthExceeds(body, 12)).toBe(false);
    expect(jsonDepthExceeds(body, 11)).toBe(true);
    expect(jsonDepthExceeds(JSON.parse(`${'{"a":'.repeat(50)}1${"}".repeat(50)}`), 49)).toBe(true);
  });

  it("reads 200,000 levels, where JSON.stringify overflows the stack, without overflowing", () => {
    const deep = nested(200_000);
    expect(() => JSON.stringify(deep)).toThrow(RangeError);
    expect(jsonDepthExceeds(deep, 128)).toBe(true);
  });
});
