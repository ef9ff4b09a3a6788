import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { describeConfig } from "./describe.js";

// The README's configuration reference is what a newcomer reads; it must name every key
// the schema accepts, with its environment variable, and nothing the schema does not.
const README = readFileSync(new URL("../../../README.md", import.meta.url), "utf8");
const section = README.slice(README.indexOf("## Configuration"), README.indexOf("## How it is built"));
/** key → env column of every table row, whatever the column alignment. */
const documented = new Map(
  section
    .split("\n")
    .filter((line) => line.startsWith("| `"))
    .map((line) => line.split("|").map((cell) => cell.trim().replace(/^`|`$/g, "")))
    .map((cells) => [cells[1]!, cells[2]!]),
);

describe("README configuration reference", () => {
  const keys = describeConfig().filter((k) => !k.key.startsWith("prices.") && k.key !== "prices");

  it.each(keys.map((k) => [k.key, k.env]))("documents %s as %s", (key, env) => {
    expect(documented.get(key)).toBe(env);
  });

  it("documents no key the schema does not have", () => {
    const known = new Set([...keys.map((k) => k.key), "prices.<model>"]);
    expect([...documented.keys()].filter((k) => !known.has(k))).toEqual([]);
  });
});
