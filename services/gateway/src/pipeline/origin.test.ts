import { describe, expect, it } from "vitest";
import { RequestHeaders } from "../http/headers.js";
import { originReader } from "./origin.js";

const read = originReader({
  token: "the-control-token",
  read_token: "the-read-token",
  host: "127.0.0.1",
  insecure: false,
});
/** The headers of an operator's call, with `changes` (null: the header left out). */
const headers = (changes: Record<string, string | string[] | null> = {}) => {
  const all: Record<string, string | string[] | null> = {
    "x-holdfast-origin": "replay",
    "x-holdfast-origin-run": "agent-1",
    "x-holdfast-origin-step": "3",
    "x-holdfast-control-token": "the-control-token",
    ...changes,
  };
  return new RequestHeaders(
    Object.entries(all).flatMap(([name, value]) =>
      value === null ? [] : Array.isArray(value) ? value.flatMap((v) => [name, v]) : [name, value],
    ),
  );
};

describe("a call's origin headers: an operator's call from a recorded step, or refused", () => {
  it("reads an operator's call, and none from an agent's", () => {
    expect(read(headers(), "eval")).toEqual({ kind: "replay", runId: "agent-1", step: 3 });
    expect(read(new RequestHeaders([]), "prod")).toBeUndefined();
    expect(read(headers({ "x-holdfast-origin-run": encodeURIComponent("a b/ü") }), "eval")?.runId).toBe(
      "a b/ü",
    );
  });

  it.each([
    ["no control token", { "x-holdfast-control-token": null }, 401, /needs the control token/],
    ["the read-only token", { "x-holdfast-control-token": "the-read-token" }, 401, /not the control token/],
    ["another kind", { "x-holdfast-origin": "delete" }, 400, /one of replay, fork, compare/],
    ["step 0", { "x-holdfast-origin-step": "0" }, 400, /recorded step's number/],
    ["a step past any run's", { "x-holdfast-origin-step": "99999999999" }, 400, /recorded step's number/],
    ["a step that is no number", { "x-holdfast-origin-step": "1; drop" }, 400, /recorded step's number/],
    [
      "a run that is no percent-encoding",
      { "x-holdfast-origin-run": "%E0%A4%A" },
      400,
      /not percent-encoded/,
    ],
    ["a run with a control character", { "x-holdfast-origin-run": "%07bell" }, 400, /control character/],
    ["the origin twice, differing", { "x-holdfast-origin": ["replay", "fork"] }, 400, /more than once/],
  ])("refuses %s", (_what, changes, status, message) => {
    const given = headers(changes);
    expect(() => read(given, "eval")).toThrow(message);
    expect(() => read(given, "eval")).toThrow(expect.objectContaining({ status }));
  });

  it("refuses an operator's call under any tag but eval", () => {
    expect(() => read(headers(), "prod")).toThrow(/runs under the tag eval/);
  });
});
