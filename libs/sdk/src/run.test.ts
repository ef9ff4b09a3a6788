import { describe, expect, it } from "vitest";
import { MAX_RESULT_BYTES, Run, type RunSettings, recordableJson } from "./run.js";

describe("recordableJson", () => {
  it("records JSON values as their JSON and undefined as nothing", () => {
    expect(recordableJson({ a: [1, "two", null] }, "a step")).toBe('{"a":[1,"two",null]}');
    expect(recordableJson("text", "a step")).toBe('"text"');
    expect(recordableJson(undefined, "a step")).toBe("");
  });

  it("refuses what JSON cannot hold with a message that says what it was", () => {
    expect(() => recordableJson(() => 1, "a step")).toThrow("a function is not a JSON value");
    expect(() => recordableJson(Symbol("s"), "a step")).toThrow("a symbol is not a JSON value");
    expect(() => recordableJson(10n, "a step")).toThrow(TypeError);
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    expect(() => recordableJson(cycle, "a step")).toThrow(/circular/);
  });

  it("refuses a result larger than an event may carry, naming the limit", () => {
    const big = "x".repeat(MAX_RESULT_BYTES);
    expect(() => recordableJson(big, "a run")).toThrow(
      `${MAX_RESULT_BYTES + 2} bytes, more than the ${MAX_RESULT_BYTES} a run may record`,
    );
    expect(recordableJson("x".repeat(MAX_RESULT_BYTES - 2), "a run")).toHaveLength(MAX_RESULT_BYTES);
  });
});

describe("a run's gateway headers", () => {
  const settings = (over: Partial<RunSettings>): RunSettings => ({
    runId: "agent-1",
    lease: 1,
    tag: "",
    tenant: "",
    recorded: [],
    attempts: {},
    retryDelaysMs: [0],
    gatewayUrl: "http://127.0.0.1:4141",
    recorder: { record: async () => undefined },
    ...over,
  });

  it("name the run, and nothing else for an untenanted run", () => {
    expect(new Run(settings({})).gateway.headers).toEqual({ "X-Holdfast-Run": "agent-1" });
  });

  it("name a tenant's run with its tenant, so the gateway scopes its id the same (<tenant>/…)", () => {
    const run = new Run(settings({ runId: "acme/agent-1", tenant: "acme", tag: "nightly" }));
    expect(run.gateway.headers).toEqual({
      "X-Holdfast-Run": "acme/agent-1",
      "X-Holdfast-Tag": "nightly",
      "X-Holdfast-Tenant": "acme",
    });
  });

  it("carry the tenant's gateway key when the worker was given it", () => {
    const run = new Run(settings({ runId: "acme/agent-1", tenant: "acme", tenantKey: "hfk_acme" }));
    expect(run.gateway.headers).toMatchObject({ "X-Holdfast-Tenant": "acme", "X-Holdfast-Key": "hfk_acme" });
  });
});
