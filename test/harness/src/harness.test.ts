import { describe, expect, it } from "vitest";
import { NatsUrlUnavailableError, WaitForTimeoutError } from "./errors.js";
import { natsUrl, uniqueNamespace, waitFor } from "./index.js";

describe("uniqueNamespace", () => {
  it("is a lowercase token that JetStream and ClickHouse both accept", () => {
    for (const label of ["Bus Append", "123 numbers first", "", "ünïcode/slashes.dots>", "a".repeat(100)]) {
      const name = uniqueNamespace(label);
      expect(name).toMatch(/^[a-z][a-z0-9_]*$/);
      expect(name.length).toBeLessThanOrEqual(64);
    }
  });

  it("keeps the label readable", () => {
    expect(uniqueNamespace("Bus Append")).toMatch(/^bus_append_/);
  });

  it("never repeats", () => {
    const names = new Set(Array.from({ length: 1000 }, () => uniqueNamespace("same")));
    expect(names.size).toBe(1000);
  });
});

describe("waitFor", () => {
  it("returns the first truthy result", async () => {
    let calls = 0;
    const value = await waitFor(async () => (++calls >= 3 ? { calls } : undefined), { intervalMs: 1 });
    expect(value).toEqual({ calls: 3 });
  });

  it("keeps polling through errors", async () => {
    let calls = 0;
    const value = await waitFor(
      () => {
        calls += 1;
        if (calls < 3) throw new Error("not yet");
        return "ready";
      },
      { intervalMs: 1 },
    );
    expect(value).toBe("ready");
  });

  it("says what it waited for and what it last saw", async () => {
    const attempt = waitFor(
      () => {
        throw new Error("projection at 4 of 5");
      },
      { timeoutMs: 20, intervalMs: 5, message: "the projection to catch up" },
    );
    await expect(attempt).rejects.toBeInstanceOf(WaitForTimeoutError);
    await expect(attempt).rejects.toThrow(/the projection to catch up \(last error: projection at 4 of 5\)/);
  });
});

describe("natsUrl", () => {
  it("explains itself outside the tiers that start a server", () => {
    expect(() => natsUrl()).toThrow(NatsUrlUnavailableError);
  });
});
