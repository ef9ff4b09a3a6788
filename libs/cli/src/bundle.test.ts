import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BUNDLE_FORMAT, BUNDLE_VERSION, bundleRun, readBundle } from "./bundle.js";

const base = {
  format: BUNDLE_FORMAT,
  version: BUNDLE_VERSION,
  exportedAtMs: 0,
  runId: "r",
  run: {},
  events: [],
  quarantined: [],
  decisions: [],
  steps: [],
  redaction: { credentials: "", patterns: [] },
};

const dir = mkdtempSync(join(tmpdir(), "holdfast-bundle-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("holdfast show --bundle: a bundle file is read as it was written, or refused", () => {
  it("reads a bundle with nothing in it as a run with no steps", () => {
    const file = join(dir, "empty.json");
    writeFileSync(file, JSON.stringify(base));
    expect(bundleRun(readBundle(file)).view.steps).toEqual([]);
  });

  it.each([
    [
      "a quarantined message whose data is no string",
      { quarantined: [{ streamSequence: 1, data: { length: 1e9 } }] },
      /quarantined message 1 is malformed/,
    ],
    ["an event with no envelope", { events: [{ streamSequence: 1 }] }, /event 1 is malformed/],
    [
      "a step whose request text is missing",
      { steps: [{ step: 1, stepId: "s", missing: [], request: { api: "x", bytes: 1 }, answer: null }] },
      /step record 1 is malformed/,
    ],
    ["lists that are not lists", { steps: { length: 1e9 } }, /are not all lists/],
    ["another format", { format: "something-else" }, /is not a Holdfast bundle of version 1/],
  ])("refuses %s", (_what, change, message) => {
    const file = join(dir, "bad.json");
    writeFileSync(file, JSON.stringify({ ...base, ...change }));
    expect(() => readBundle(file)).toThrow(message);
  });

  it("refuses a file that is no JSON, saying which", () => {
    const file = join(dir, "bad.json");
    writeFileSync(file, "{ not json");
    expect(() => readBundle(file)).toThrow(/bad.json is not a Holdfast bundle/);
  });
});
