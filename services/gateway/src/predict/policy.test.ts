import { initialState, NO_LIMITS, type RunState } from "@holdfast/events";
import { type Decision, decide, type Figures, KeyWindow, type Need } from "@holdfast/predict";
import { describe, expect, it } from "vitest";
import { InvalidRequestError } from "../errors.js";
import {
  BACKOFF_MS,
  type Ceiling,
  COORDINATOR_CATCH_UP_MS,
  checkpointStep,
  coordinatorCatchUpMs,
  countExactly,
  deadlineOf,
  nextStep,
  priorityOf,
  probeStep,
  refusalOnly,
  retryWaitMs,
  roomFrom,
  summaryMaxInputTokens,
  summaryStep,
  turnStep,
  UNKNOWN_TO_COORDINATOR_MS,
} from "./policy.js";

const NOW = Date.parse("2026-12-03T12:00:00Z");
const THRESHOLD_MS = 15_000;
/** A call that came to prediction now, with predict.max_wait_s of 60. */
const CEILING: Ceiling = { sinceMs: NOW, maxWaitMs: 60_000 };

const tokens = (n: number): Need => ({ requests: 1, tokens: n, inputTokens: 0, outputTokens: 0 });

/**
 * A key whose last answer (to a call started at NOW) left `left` of 6,000 tokens a minute,
 * refilling evenly (100 tokens a second) to full by its reset (as its operator said it
 * does), and 30 requests of 30.
 */
function keyWith(left: number): KeyWindow {
  const window = new KeyWindow("0123456789abcdef", "https://api.example", "continuous");
  window.observe(
    {
      tokens: { limit: 6_000, remaining: left, resetAtMs: NOW + (6_000 - left) * 10 },
      requests: { limit: 30, remaining: 30, resetAtMs: NOW },
    },
    NOW,
    NOW,
  );
  return window;
}

/** The decision for a call needing `need` tokens of a key that has `left`, at `nowMs`. */
function decided(left: number, need: number, nowMs = NOW): Decision {
  return decide({ window: keyWith(left), need: tokens(need), nowMs, waitThresholdMs: THRESHOLD_MS });
}

const FIGURES: Figures = { dimension: "tokens", limit: 6_000, remaining: 0, needed: 1_000, resetAtMs: NOW };

describe("nextStep: when to wait and for how long", () => {
  it("goes on when the window has room", () => {
    expect(nextStep(decided(5_000, 1_000), NOW, CEILING, "auto_resume")).toEqual({ kind: "go" });
  });

  it("waits in place, as long as the window takes to refill what the call needs", () => {
    const step = nextStep(decided(0, 1_000), NOW, CEILING, "auto_resume");
    expect(step.kind).toBe("wait");
    if (step.kind !== "wait") return;
    // 1,000 tokens at 100 a second: ten seconds, and a little after rather than before.
    expect(step.waitMs).toBeGreaterThanOrEqual(10_000);
    expect(step.waitMs).toBeLessThan(11_000);
    expect(step.untilMs).toBe(NOW + step.waitMs);
    expect(step.figures.dimension).toBe("tokens");
  });

  it("counts a wait from the clock it is given: later, less is left to wait", () => {
    const decision = decided(0, 1_000);
    const first = nextStep(decision, NOW, CEILING, "auto_resume");
    const later = nextStep(decision, NOW + 4_000, CEILING, "auto_resume");
    expect(first.kind === "wait" && later.kind === "wait" && first.waitMs - later.waitMs).toBe(4_000);
  });

  it("gives up at once, with how long the window needs as retry-after, on a wait past the call's ceiling", () => {
    const decision: Decision = { action: "wait", untilMs: NOW + 70_000, figures: FIGURES };
    expect(nextStep(decision, NOW + 5_000, CEILING, "auto_resume")).toEqual({
      kind: "give_up",
      retryAfterMs: 65_000,
    });
  });

  it("counts the ceiling from when the call first came, not from now", () => {
    const decision: Decision = { action: "wait", untilMs: NOW + 50_000, figures: FIGURES };
    expect(nextStep(decision, NOW + 40_000, CEILING, "auto_resume").kind).toBe("wait");
    expect(
      nextStep(decision, NOW + 40_000, { sinceMs: NOW - 20_000, maxWaitMs: 60_000 }, "auto_resume"),
    ).toEqual({ kind: "give_up", retryAfterMs: 10_000 });
  });

  it("checkpoints the run on a wait longer than the threshold", () => {
    const decision = decided(0, 5_000);
    expect(decision.action).toBe("checkpoint");
    const step = nextStep(decision, NOW, CEILING, "auto_resume");
    expect(step).toEqual({ kind: "checkpoint", decision });
  });

  it("a checkpoint the gateway would resume past the ceiling is given up; one an operator resumes is taken", () => {
    const decision: Decision = {
      action: "checkpoint",
      untilMs: NOW + 90_000,
      why: "threshold",
      figures: FIGURES,
    };
    expect(nextStep(decision, NOW, CEILING, "auto_resume")).toEqual({
      kind: "give_up",
      retryAfterMs: 90_000,
    });
    expect(nextStep(decision, NOW, CEILING, "hold")).toEqual({ kind: "checkpoint", decision });
  });

  it("refuses a call larger than the whole window", () => {
    expect(nextStep(decided(6_000, 7_000), NOW, CEILING, "auto_resume")).toEqual({ kind: "too_large" });
  });
});

describe("checkpointStep: the fleet coordinator's checkpoint", () => {
  const decision = {
    action: "checkpoint",
    untilMs: NOW + 30_000,
    why: "deadline",
    figures: FIGURES,
  } as const;

  it("is taken within the ceiling", () => {
    expect(checkpointStep(decision, NOW, CEILING, "auto_resume")).toEqual({ kind: "checkpoint", decision });
  });

  it("is given up when the call has waited most of its ceiling already", () => {
    expect(
      checkpointStep(decision, NOW + 1_000, { sinceMs: NOW - 40_000, maxWaitMs: 60_000 }, "auto_resume"),
    ).toEqual({
      kind: "give_up",
      retryAfterMs: 29_000,
    });
  });
});

describe("probeStep: a key nothing is read of yet", () => {
  const unknownKey = {
    known: false,
    silent: false,
    prober: "none",
    callsInFlight: 0,
    probed: false,
  } as const;

  it("lets the first call go out to read it", () => {
    expect(probeStep(unknownKey)).toBe("claim");
  });

  it("keeps the others until that call's answer says what the window is", () => {
    expect(probeStep({ ...unknownKey, prober: "other" })).toBe("wait_for_reading");
    expect(probeStep({ ...unknownKey, callsInFlight: 1 })).toBe("wait_for_reading");
  });

  it("decides the probing call itself as any other", () => {
    expect(probeStep({ ...unknownKey, prober: "this" })).toBe("decide");
  });

  it("decides at once on a key that is read, that reports nothing, or after one wait for a reading", () => {
    expect(probeStep({ ...unknownKey, prober: "other", known: true })).toBe("decide");
    expect(probeStep({ ...unknownKey, prober: "other", silent: true })).toBe("decide");
    expect(probeStep({ ...unknownKey, prober: "other", probed: true })).toBe("decide");
  });
});

describe("coordinatorCatchUpMs: a key this gateway has read and the fleet's coordinator not yet", () => {
  it("asks again in a moment, rather than spending a window another gateway spends too", () => {
    expect(coordinatorCatchUpMs(false, true, NOW + 100, NOW)).toBe(COORDINATOR_CATCH_UP_MS);
  });

  it("decides here once the call has waited for the coordinator long enough", () => {
    expect(coordinatorCatchUpMs(false, true, NOW + UNKNOWN_TO_COORDINATOR_MS, NOW)).toBeUndefined();
  });

  it("does not wait when the coordinator knows the key, or this gateway does not either", () => {
    expect(coordinatorCatchUpMs(true, true, NOW, NOW)).toBeUndefined();
    expect(coordinatorCatchUpMs(false, false, NOW, NOW)).toBeUndefined();
  });
});

describe("turnStep: a call queued at the fleet's coordinator", () => {
  it("waits its turn for what is left of its ceiling", () => {
    expect(turnStep(NOW + 30_000, NOW + 10_000, CEILING)).toEqual({ kind: "wait", leftMs: 50_000 });
  });

  it("gives up at once on a turn expected past its ceiling, with that turn as retry-after", () => {
    expect(turnStep(NOW + 75_000, NOW + 10_000, CEILING)).toEqual({ kind: "give_up", retryAfterMs: 65_000 });
  });
});

describe("retryWaitMs: a 429 that slipped through", () => {
  const open = decided(6_000, 1_000);

  it("waits what the provider asked when the window is open", () => {
    expect(retryWaitMs({ decision: open, askedMs: 3_000, attempt: 1, nowMs: NOW, ceiling: CEILING })).toBe(
      3_000,
    );
  });

  it("backs off exponentially from 1 s when the provider named no wait", () => {
    const waits = [1, 2, 3].map((attempt) =>
      retryWaitMs({ decision: open, askedMs: undefined, attempt, nowMs: NOW, ceiling: CEILING }),
    );
    expect(waits).toEqual([BACKOFF_MS, 2 * BACKOFF_MS, 4 * BACKOFF_MS]);
  });

  it("waits what the provider asked, not for the reset, on a window not known to refill as it goes", () => {
    // The window's figure is its reset, 56 s off; the provider says the call fits in 919 ms.
    const decision: Decision = {
      action: "checkpoint",
      why: "threshold",
      untilMs: NOW + 56_000,
      figures: FIGURES,
    };
    const asked = {
      decision,
      askedMs: 919,
      attempt: 1,
      nowMs: NOW,
      ceiling: { sinceMs: NOW, maxWaitMs: 20_000 },
    };
    expect(retryWaitMs({ ...asked, askedFirst: true })).toBe(919);
    expect(retryWaitMs(asked)).toBeUndefined();
    // With no retry-after to go by, the reset it is; and a retry-after of 0 is none.
    expect(retryWaitMs({ ...asked, askedMs: undefined, askedFirst: true })).toBeUndefined();
    expect(retryWaitMs({ ...asked, askedMs: 0, askedFirst: true })).toBeUndefined();
  });

  it("waits for the window when it needs longer than the provider asked", () => {
    const decision: Decision = { action: "wait", untilMs: NOW + 8_000, figures: FIGURES };
    expect(retryWaitMs({ decision, askedMs: 3_000, attempt: 1, nowMs: NOW, ceiling: CEILING })).toBe(8_000);
    expect(retryWaitMs({ decision, askedMs: undefined, attempt: 1, nowMs: NOW, ceiling: CEILING })).toBe(
      8_000,
    );
  });

  it("does not retry a call larger than the whole window, or one whose wait ends past its ceiling", () => {
    const tooLarge: Decision = { action: "too_large", figures: FIGURES };
    expect(
      retryWaitMs({ decision: tooLarge, askedMs: 1_000, attempt: 1, nowMs: NOW, ceiling: CEILING }),
    ).toBeUndefined();
    expect(
      retryWaitMs({ decision: open, askedMs: 30_000, attempt: 1, nowMs: NOW + 40_000, ceiling: CEILING }),
    ).toBeUndefined();
  });
});

describe("refusalOnly: when a retry-after asks to wait", () => {
  const reading = {
    tokens: { limit: 6_000, remaining: 10, resetAtMs: NOW + 1_000 },
    retryAfterMs: 86_400_000,
  };

  it("on a refusal (429, 503) the reading keeps its retry-after", () => {
    expect(refusalOnly(reading, 429)).toEqual(reading);
    expect(refusalOnly(reading, 503)).toEqual(reading);
  });

  it("on an answer the provider served, the retry-after is no reading; the rest is", () => {
    expect(refusalOnly(reading, 200)).toEqual({ tokens: reading.tokens });
    expect(refusalOnly({ retryAfterMs: 86_400_000 }, 200)).toBeUndefined();
  });
});

describe("roomFrom: what routing chooses a target by", () => {
  it("a key nothing is read of is taken as whole", () => {
    expect(roomFrom(undefined, NOW)).toEqual({ kind: "unknown" });
  });

  it("a window with room: the share of its tightest dimension the call leaves", () => {
    expect(roomFrom(decided(3_000, 1_500), NOW)).toEqual({ kind: "ready", headroom: 0.25 });
  });

  it("a window that must refill first: how long, from now", () => {
    const room = roomFrom(decided(0, 1_000), NOW + 2_000);
    expect(room.kind).toBe("wait");
    expect(room.kind === "wait" && room.waitMs).toBeGreaterThanOrEqual(8_000);
  });

  it("a call larger than the whole window", () => {
    expect(roomFrom(decided(6_000, 7_000), NOW)).toEqual({ kind: "too_large" });
  });
});

describe("countExactly: when a guess is not good enough", () => {
  it("a call with plenty to spare goes on the guess", () => {
    expect(countExactly(decided(6_000, 1_000))).toBe(false);
  });

  it("a call near the window's end, or one that would wait, is counted with the model's tokenizer", () => {
    expect(countExactly(decided(1_500, 1_000))).toBe(true);
    expect(countExactly(decided(0, 1_000))).toBe(true);
  });

  it("a call too large for the whole window is refused without counting", () => {
    expect(countExactly(decided(6_000, 7_000))).toBe(false);
  });
});

describe("a compaction's summary call", () => {
  it("sends at most half the window's smallest token limit", () => {
    expect(summaryMaxInputTokens(keyWith(6_000), NOW)).toBe(3_000);
  });

  it("is unbounded on a key whose window reports no tokens", () => {
    expect(summaryMaxInputTokens(new KeyWindow("0123456789abcdef", "https://api.example"), NOW)).toBe(
      Number.POSITIVE_INFINITY,
    );
  });

  it("goes when there is room, waits within the ceiling, and is not sent past it", () => {
    expect(summaryStep(decided(6_000, 1_000), NOW, CEILING)).toEqual({ kind: "go" });
    const waiting = summaryStep(decided(0, 1_000), NOW, CEILING);
    expect(waiting.kind).toBe("wait");
    expect(summaryStep({ action: "wait", untilMs: NOW + 61_000, figures: FIGURES }, NOW, CEILING)).toEqual({
      kind: "skip",
    });
    expect(summaryStep({ action: "too_large", figures: FIGURES }, NOW, CEILING)).toEqual({ kind: "skip" });
  });
});

describe("deadlineOf: a run must not wait past its max_minutes window", () => {
  const started = (startedMs: number): RunState => {
    const state = initialState("run-1");
    return { ...state, window: { ...state.window, startedMs } };
  };

  it("is the end of the run's window", () => {
    const limits = () => ({ ...NO_LIMITS, maxMinutes: 10 });
    expect(deadlineOf(started(NOW), "", limits)).toBe(NOW + 600_000);
  });

  it("is none without a minutes limit, for a run not started, or one not known", () => {
    expect(deadlineOf(started(NOW), "", () => NO_LIMITS)).toBeUndefined();
    expect(deadlineOf(started(0), "", () => ({ ...NO_LIMITS, maxMinutes: 10 }))).toBeUndefined();
    expect(deadlineOf(undefined, "", () => ({ ...NO_LIMITS, maxMinutes: 10 }))).toBeUndefined();
  });

  it("takes the limits of the run's recorded tag, else of the call's", () => {
    const byTag = (tag: string) => ({ ...NO_LIMITS, maxMinutes: tag === "batch" ? 5 : 0 });
    expect(deadlineOf(started(NOW), "batch", byTag)).toBe(NOW + 300_000);
    expect(deadlineOf({ ...started(NOW), tag: "batch" }, "other", byTag)).toBe(NOW + 300_000);
  });
});

describe("priorityOf: a call's place in the fleet's queue", () => {
  it("is the header's, else the run's tag's, else 0", () => {
    expect(priorityOf("7", "batch", { batch: 3 })).toBe(7);
    expect(priorityOf(["-2", "9"], "batch", { batch: 3 })).toBe(-2);
    expect(priorityOf(undefined, "batch", { batch: 3 })).toBe(3);
    expect(priorityOf(undefined, "other", { batch: 3 })).toBe(0);
  });

  it("refuses a header that is not an integer from -1000 to 1000, naming it", () => {
    for (const header of ["1001", "high", "1.5", ""]) {
      const refused = priorityOf(header, "", {});
      expect(refused).toBeInstanceOf(InvalidRequestError);
      expect(refused instanceof InvalidRequestError && refused.message).toContain("X-Holdfast-Priority");
    }
  });
});
