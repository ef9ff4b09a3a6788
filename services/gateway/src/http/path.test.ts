import { describe, expect, it } from "vitest";
import { normalizeTarget } from "./path.js";

describe("normalizeTarget", () => {
  it.each([
    ["/v1/chat/completions", "/v1/chat/completions"],
    ["/v1/chat/completions/", "/v1/chat/completions"],
    ["/v1/chat//completions", "/v1/chat/completions"],
    ["/v1//chat/completions", "/v1/chat/completions"],
    ["//v1///chat/completions//", "/v1/chat/completions"],
    ["/v1/chat/%63ompletions", "/v1/chat/completions"],
    ["/v1/chat/completions?api-version=2024-10-21", "/v1/chat/completions?api-version=2024-10-21"],
    ["/v1/models/gpt-4o%2Dmini", "/v1/models/gpt-4o-mini"],
    ["/", "/"],
  ])("given %s, then it routes as %s", (target, url) => {
    expect(normalizeTarget(target)).toEqual({ ok: true, url });
  });

  it.each([
    ["/v1/../../stats", /'\.\.'/],
    ["/v1/./chat/completions", /'\.'/],
    ["/v1/%2e%2e/stats", /'\.\.'/],
    ["/v1/chat%2Fcompletions", /encoded slash/],
    ["/v1\\chat\\completions", /backslash/],
    ["/v1/chat/completions%00", /control character/],
    ["v1/chat/completions", /start with/],
  ])("given %s, then it is refused", (target, message) => {
    const result = normalizeTarget(target);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.message).toMatch(message);
  });
});
