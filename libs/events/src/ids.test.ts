import { describe, expect, it } from "vitest";
import { createIdGenerator, timestampOfId } from "./ids.js";

describe("UUIDv7 ids", () => {
  it("are RFC 9562 version 7 with the right variant", () => {
    const id = createIdGenerator()();
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it("carry their creation time", () => {
    const next = createIdGenerator(() => 1_764_680_000_123);
    expect(timestampOfId(next())).toBe(1_764_680_000_123);
  });

  it("sort in creation order even within one millisecond and when the clock steps back", () => {
    let now = 1_000;
    const next = createIdGenerator(() => now);
    const ids: string[] = [];
    for (let i = 0; i < 10_000; i++) {
      if (i === 5_000) now = 999; // clock went backwards
      if (i === 7_000) now = 1_002;
      ids.push(next());
    }
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
