import {
  type ConfiguredLimits,
  initialState,
  LimitKind,
  NO_LIMITS,
  type RunState,
  RunStatus,
} from "@holdfast/events";
import { describe, expect, it } from "vitest";
import { mustReadLog, passthroughVerdict } from "./admission.js";

// What a passed-through call that names a run meets, decided from local state.

const NOW = 1_764_000_000_000;
const running = (overrides: Partial<RunState> = {}): RunState => ({
  ...initialState("agent-7"),
  status: RunStatus.Running,
  ...overrides,
});
const limits = (overrides: Partial<ConfiguredLimits>): ConfiguredLimits => ({ ...NO_LIMITS, ...overrides });

describe("whether a passed-through call's run is read from the log first", () => {
  it("not for a run this gateway follows running, nor one it has never heard of: no round trip", () => {
    expect(mustReadLog(running(), undefined, false)).toBe(false);
    expect(mustReadLog(undefined, undefined, false)).toBe(false);
  });

  it.each([RunStatus.Held, RunStatus.Stopped])("for a run its own fold says is %s", (status) => {
    expect(mustReadLog(running({ status }), undefined, false)).toBe(true);
  });

  it.each([RunStatus.Held, RunStatus.Stopped])(
    "for a run it does not follow that the fleet's index says is %s",
    (status) => {
      expect(mustReadLog(undefined, status, false)).toBe(true);
    },
  );

  it("for a run it does not follow whose held answers it could not all see at start", () => {
    expect(mustReadLog(undefined, undefined, true)).toBe(true);
  });

  it("its own fold outranks the index (it has heard the resume)", () => {
    expect(mustReadLog(running(), RunStatus.Held, true)).toBe(false);
  });
});

describe("what a passed-through call meets", () => {
  it("a run never seen, or running within its limits, goes on", () => {
    expect(passthroughVerdict(undefined, limits({ maxSteps: 1 }), NOW)).toBe("go");
    expect(passthroughVerdict(running(), limits({ maxSteps: 5, maxCostNanoUsd: 10 }), NOW)).toBe("go");
  });

  it("a stopped run refuses it; a held run parks it", () => {
    expect(passthroughVerdict(running({ status: RunStatus.Stopped }), NO_LIMITS, NOW)).toBe("stopped");
    expect(passthroughVerdict(running({ status: RunStatus.Held }), NO_LIMITS, NOW)).toBe("held");
  });

  it("a run past its cost limit is tripped as on_trip says, as its next metered call would trip it", () => {
    const spent = running({
      window: {
        ...initialState("agent-7").window,
        startedMs: NOW - 1_000,
        costNanoUsd: 2_000,
        lastFinishedStepId: "s9",
      },
    });
    expect(passthroughVerdict(spent, limits({ maxCostNanoUsd: 1_000, onTrip: "stop" }), NOW)).toEqual({
      action: "stop",
      trip: expect.objectContaining({
        limit: LimitKind.LIMIT_KIND_COST,
        limitValue: 1_000,
        spentValue: 2_000,
        crossedByStepId: "s9",
      }),
    });
  });

  it("a run at its step limit, or past its minutes, is tripped too", () => {
    const window = { ...initialState("agent-7").window, startedMs: NOW - 120_000, steps: 3 };
    expect(passthroughVerdict(running({ window }), limits({ maxSteps: 3 }), NOW)).toMatchObject({
      action: "hold",
      trip: { limit: LimitKind.LIMIT_KIND_STEPS },
    });
    expect(passthroughVerdict(running({ window }), limits({ maxMinutes: 1 }), NOW)).toMatchObject({
      trip: { limit: LimitKind.LIMIT_KIND_MINUTES },
    });
  });

  it("a resume's own limits are the window's: a run resumed with more room goes on", () => {
    const window = {
      ...initialState("agent-7").window,
      startedMs: NOW - 1_000,
      steps: 3,
      limits: { maxCostNanoUsd: 0, maxSteps: 10, maxMinutes: 0, maxTokensPerMinute: 0 },
    };
    expect(passthroughVerdict(running({ window }), limits({ maxSteps: 3 }), NOW)).toBe("go");
  });
});
