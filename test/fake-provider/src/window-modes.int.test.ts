import { describe, expect, it } from "vitest";
import { startFakeProvider } from "./server.js";
import { API_KEY, errorOf, postAnthropic, postChat } from "./test-client.js";

// 13 prompt tokens; with max_tokens 20 a call takes 33 of a key's tokens.
const hello = {
  model: "gpt-4o-mini",
  max_tokens: 20,
  messages: [{ role: "user", content: "Hello there, how are you?" }],
};
// 13 input tokens, 20 output tokens.
const anthropicHello = { ...hello, model: "claude-3-5-haiku-20241022" };

/** Every header of the answer that says anything about the key's window, with its text. */
function windowHeaders(response: Response): Record<string, string> {
  return Object.fromEntries([...response.headers].filter(([name]) => /ratelimit|retry-after/.test(name)));
}

describe("window mode none", () => {
  it("sends no rate-limit headers on OpenAI's answers, and only retry-after in whole seconds on a 429", async () => {
    await using provider = await startFakeProvider({
      windowMode: "none",
      limitsByKey: { [API_KEY]: { tpm: 50 } },
      clock: () => 1_700_000_000_000,
    });

    const first = await postChat(provider, hello);
    const refused = await postChat(provider, hello);
    const tooLarge = await postChat(provider, { ...hello, max_tokens: 100 });

    expect(first.status).toBe(200);
    expect(windowHeaders(first)).toEqual({});
    expect(refused.status).toBe(429);
    // The bucket is still counted: 16 tokens missing at 50 a minute is 19.2 s, said as 20.
    expect(windowHeaders(refused)).toEqual({ "retry-after": "20" });
    expect(await errorOf(refused)).toMatchObject({ type: "tokens", code: "rate_limit_exceeded" });
    // Waiting cannot help a call larger than the window: nothing to say then.
    expect(tooLarge.status).toBe(429);
    expect(windowHeaders(tooLarge)).toEqual({});
  });

  it("sends no anthropic-ratelimit-* headers, and only retry-after on a 429", async () => {
    await using provider = await startFakeProvider({
      limitsByKey: { [API_KEY]: { itpm: 20, mode: "none" } },
      clock: () => Date.parse("2025-06-01T12:00:00Z"),
    });

    const first = await postAnthropic(provider, "/v1/messages", anthropicHello);
    const refused = await postAnthropic(provider, "/v1/messages", anthropicHello);

    expect(first.status).toBe(200);
    expect(windowHeaders(first)).toEqual({});
    expect(refused.status).toBe(429);
    // 6 input tokens missing at 20 a minute.
    expect(windowHeaders(refused)).toEqual({ "retry-after": "18" });
  });

  it("keeps only retry-after on an injected 429, and other keys keep their headers", async () => {
    await using provider = await startFakeProvider({
      limitsByKey: { [API_KEY]: { mode: "none" } },
      clock: () => 1_700_000_000_000,
    });

    const injected = await postChat(provider, hello, { headers: { "x-fake-fail": "429" } });
    const other = await postChat(provider, hello, { apiKey: "sk-other-0000000000000000" });

    expect(injected.status).toBe(429);
    expect(windowHeaders(injected)).toEqual({ "retry-after": "1" });
    expect(other.headers.get("x-ratelimit-limit-tokens")).toBe("100000000");
    expect(other.headers.get("x-ratelimit-remaining-requests")).toBe("999999");
  });
});

describe("window mode fixed", () => {
  it("reports one reset instant for the whole period, and the window whole again after it", async () => {
    // 20 s into a minute: the period ends 40 s later.
    let now = 1_700_000_000_000;
    await using provider = await startFakeProvider({
      windowMode: "fixed",
      limitsByKey: { [API_KEY]: { tpm: 100 } },
      clock: () => now,
    });

    const first = await postChat(provider, hello);
    now += 30_000;
    const second = await postChat(provider, hello);
    now += 5_000;
    const third = await postChat(provider, hello);
    const refused = await postChat(provider, hello);

    expect(first.headers.get("x-ratelimit-reset-tokens")).toBe("40s");
    expect(first.headers.get("x-ratelimit-remaining-tokens")).toBe("67");
    // Nothing came back in 30 s, and the reset is the same instant.
    expect(second.headers.get("x-ratelimit-remaining-tokens")).toBe("34");
    expect(second.headers.get("x-ratelimit-reset-tokens")).toBe("10s");
    expect(third.headers.get("x-ratelimit-remaining-tokens")).toBe("1");
    expect(third.headers.get("x-ratelimit-reset-requests")).toBe("5s");
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after-ms")).toBe("5000");

    now += 5_000;
    const next = await postChat(provider, hello);
    expect(next.status).toBe(200);
    expect(next.headers.get("x-ratelimit-remaining-tokens")).toBe("67");
    expect(next.headers.get("x-ratelimit-reset-tokens")).toBe("1m0s");
  });

  it("gives Anthropic's resets as the period's end", async () => {
    let now = Date.parse("2025-06-01T12:00:20Z");
    await using provider = await startFakeProvider({ windowMode: "fixed", clock: () => now });

    const first = await postAnthropic(provider, "/v1/messages", anthropicHello);
    now += 12_500;
    const second = await postAnthropic(provider, "/v1/messages", anthropicHello);

    for (const answer of [first, second]) {
      expect(answer.headers.get("anthropic-ratelimit-input-tokens-reset")).toBe("2025-06-01T12:01:00Z");
      expect(answer.headers.get("anthropic-ratelimit-requests-reset")).toBe("2025-06-01T12:01:00Z");
    }
  });
});

describe("window mode sliding", () => {
  it("gives back what was spent one window later, and says so in its headers", async () => {
    let now = 1_700_000_000_000;
    await using provider = await startFakeProvider({
      limitsByKey: { [API_KEY]: { tpm: 70, mode: "sliding", windowMs: 10_000 } },
      clock: () => now,
    });

    await postChat(provider, hello);
    now += 4_000;
    const second = await postChat(provider, hello);
    now += 1_000;
    const refused = await postChat(provider, hello);
    now += 5_000;
    const third = await postChat(provider, hello);

    expect(second.headers.get("x-ratelimit-remaining-tokens")).toBe("4");
    expect(second.headers.get("x-ratelimit-reset-tokens")).toBe("10s");
    expect(refused.status).toBe(429);
    // The first call's 33 expire 10 s after it was admitted.
    expect(refused.headers.get("retry-after-ms")).toBe("5000");
    expect(third.status).toBe(200);
    expect(third.headers.get("x-ratelimit-remaining-tokens")).toBe("4");
    expect(third.headers.get("x-ratelimit-reset-tokens")).toBe("10s");
  });
});
