import { describe, expect, it } from "vitest";
import { checkReaderProfile, type QueryLimits, type SettingRow } from "./reader.js";

// The server reader's profile, judged from the rows `system.settings` gives its user.
// `readonly` is the column a server fills with 1 for a setting the user cannot change.

const LIMITS: QueryLimits = { maxRows: 10_000, maxExecutionMs: 30_000, maxMemoryBytes: 1_073_741_824 };

/** The README's profile: readonly = 2, every limit at Holdfast's and CONST. */
function profile(overrides: Record<string, Partial<SettingRow>> = {}): SettingRow[] {
  const rows: Record<string, SettingRow> = {
    readonly: { name: "readonly", value: "2", readonly: 1 },
    max_result_rows: { name: "max_result_rows", value: "10001", readonly: 1 },
    max_result_bytes: { name: "max_result_bytes", value: "1073741824", readonly: 1 },
    max_execution_time: { name: "max_execution_time", value: "30", readonly: 1 },
    max_memory_usage: { name: "max_memory_usage", value: "1073741824", readonly: 1 },
  };
  for (const [name, change] of Object.entries(overrides)) rows[name] = { ...rows[name]!, ...change };
  return Object.values(rows);
}

function refusal(rows: SettingRow[]): string {
  const checked = checkReaderProfile(rows, LIMITS);
  if (!("refusal" in checked)) throw new Error("expected a refusal");
  return checked.refusal;
}

describe("a server reader's settings profile", () => {
  it("is accepted as the README writes it, and its values are the limits", () => {
    expect(checkReaderProfile(profile(), LIMITS)).toEqual({ limits: LIMITS });
  });

  it("is accepted at readonly = 1, where no setting can change, and tighter limits become the limits", () => {
    const rows = profile({
      readonly: { value: "1" },
      max_result_rows: { value: "101" },
      max_execution_time: { value: "5" },
      max_memory_usage: { value: "1000000" },
    });
    expect(checkReaderProfile(rows, LIMITS)).toEqual({
      limits: { maxRows: 100, maxExecutionMs: 5_000, maxMemoryBytes: 1_000_000 },
    });
  });

  it("is refused when it may write", () => {
    expect(refusal(profile({ readonly: { value: "0", readonly: 0 } }))).toMatch(/readonly = 0/);
  });

  it("is refused when its limits are not CONST, naming each one a query could lift", () => {
    const message = refusal(
      profile({
        readonly: { value: "2" },
        max_result_rows: { readonly: 0 },
        max_memory_usage: { readonly: 0 },
      }),
    );
    expect(message).toMatch(/max_result_rows, max_memory_usage not CONST/);
    expect(message).not.toMatch(/max_execution_time/);
  });

  it("is refused when a limit is above Holdfast's configured one", () => {
    expect(refusal(profile({ max_result_rows: { value: "1000000" } }))).toMatch(
      /max_result_rows = 1000000, above 10001 \(analytics\.max_rows \+ 1\)/,
    );
    expect(refusal(profile({ max_execution_time: { value: "3600" } }))).toMatch(
      /max_execution_time = 3600, above 30/,
    );
  });

  it("is refused when a limit is unset (0) or missing from what the server said", () => {
    expect(refusal(profile({ max_memory_usage: { value: "0" } }))).toMatch(
      /max_memory_usage = 0 \(no limit\)/,
    );
    const withoutBytes = profile().filter((row) => row.name !== "max_result_bytes");
    expect(refusal(withoutBytes)).toMatch(/max_result_bytes = 0 \(no limit\)/);
    expect(refusal([])).toMatch(/readonly = 0/);
  });
});
