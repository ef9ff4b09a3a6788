import { describe, expect, it } from "vitest";
import { MAX_WINDOW_COUNT, MAX_WINDOW_WAIT_MS } from "./headers.js";
import { asOfOfRecorded, type RecordedWindow, readingOfRecorded } from "./observed.js";

const AT = Date.parse("2026-12-03T12:00:00Z");
const window = (w: Partial<RecordedWindow>): RecordedWindow => ({
  reported: true,
  limit: 1_000,
  remaining: 500,
  resetAtMs: AT + 1_000,
  ...w,
});
const recorded = (requests: RecordedWindow | undefined, retryAfterMs = 0) => ({
  requests,
  tokens: undefined,
  inputTokens: undefined,
  outputTokens: undefined,
  retryAfterMs,
});

// A reading recorded before gateways bounded them (or by anything holding a gateway's
// credential) is held to the same bounds when a window takes it in: a figure past them
// cannot keep a key's window shut for years, in the coordinator or in any gateway.
describe("a recorded reading as a window takes it in", () => {
  it("takes a reading within bounds as it was recorded", () => {
    expect(readingOfRecorded(recorded(window({}), 2_000), AT)).toEqual({
      requests: { limit: 1_000, remaining: 500, resetAtMs: AT + 1_000 },
      retryAfterMs: 2_000,
    });
  });

  it("leaves out a retry-after of years, and a reset further than the bound either way", () => {
    const far = AT + MAX_WINDOW_WAIT_MS + 1;
    expect(readingOfRecorded(recorded(window({ resetAtMs: far }), 99_999_999_999_000), AT)).toEqual({
      requests: { limit: 1_000, remaining: 500, resetAtMs: undefined },
    });
    expect(readingOfRecorded(recorded(window({ resetAtMs: AT - MAX_WINDOW_WAIT_MS - 1 })), AT)).toEqual({
      requests: { limit: 1_000, remaining: 500, resetAtMs: undefined },
    });
  });

  it("drops a dimension whose remaining is past the bound or negative, and a limit past the bound", () => {
    expect(readingOfRecorded(recorded(window({ remaining: 2 ** 53 })), AT)).toEqual({});
    expect(readingOfRecorded(recorded(window({ remaining: -5 })), AT)).toEqual({});
    expect(readingOfRecorded(recorded(window({ limit: MAX_WINDOW_COUNT + 1 })), AT)).toEqual({
      requests: { limit: undefined, remaining: 500, resetAtMs: AT + 1_000 },
    });
  });

  it("takes a remaining above the limit as the limit", () => {
    expect(readingOfRecorded(recorded(window({ remaining: 5_000 })), AT).requests?.remaining).toBe(1_000);
  });
});

describe("when a recorded reading's call was sent", () => {
  it("is as recorded, or when it was recorded if not said", () => {
    expect(asOfOfRecorded(AT - 300, AT, AT + 10)).toBe(AT - 300);
    expect(asOfOfRecorded(0, AT, AT + 10)).toBe(AT);
  });

  it("is never after the reading was recorded, nor after now: a send time a peer puts in the future would make every later reading look older and be dropped", () => {
    expect(asOfOfRecorded(AT + 86_400_000, AT, AT + 10)).toBe(AT);
    expect(asOfOfRecorded(AT + 86_400_000, AT + 86_400_000, AT)).toBe(AT);
  });
});
