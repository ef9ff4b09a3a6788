import { createHash } from "node:crypto";
import { decodeStored, encodeEnvelope, isKnown, makeEnvelope, type RunView } from "@holdfast/events";
import { publishRaw } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_KEY, type Stack, startStack } from "../stack.js";

// An upstream that writes rate-limit headers no provider would (past 2^64, negative, not a
// number, a reset 10^20 s or eight thousand years away, a retry-after of centuries): a buggy
// self-hosted server, a proxy, or a tampered http:// upstream. Such a figure made a
// RateLimitObserved no reader could decode (an int64 past 2^53), or a window, the
// gateway's own and the fleet's at the budget service, that made every later call on the
// key wait for years (refused) or grant without bound. Now the figures past their bounds
// are not believed: each call is answered and metered, the key's readings decode and stay
// within the bounds, and the next ordinary call on the key goes straight on.

let stack: Stack;
beforeAll(async () => {
  // Prediction on, its windows shared through the budget service (the defaults).
  stack = await startStack({});
});
afterAll(async () => {
  await stack?.close();
});

// The bounds a recorded reading keeps to (libs/predict/src/headers.ts).
const MAX_COUNT = 1e12;
const MAX_AHEAD_MS = 31 * 24 * 3_600_000;

interface Case {
  name: string;
  shape: "chat" | "messages";
  headers: Record<string, string>;
}

const CASES: Case[] = [
  {
    name: "limits and remainders past 2^64, and written as 1e30",
    shape: "chat",
    headers: {
      "x-ratelimit-limit-tokens": "18446744073709551616",
      "x-ratelimit-remaining-tokens": "18446744073709551615",
      "x-ratelimit-limit-requests": "1e30",
      "x-ratelimit-remaining-requests": "1e30",
    },
  },
  {
    name: "negative and not-a-number figures",
    shape: "chat",
    headers: {
      "x-ratelimit-limit-tokens": "NaN",
      "x-ratelimit-remaining-tokens": "-5",
      "x-ratelimit-remaining-requests": "Infinity",
      "x-ratelimit-reset-requests": "-1s",
    },
  },
  {
    name: "a reset 10^20 s away on an empty window",
    shape: "chat",
    headers: {
      "x-ratelimit-limit-tokens": "1000000",
      "x-ratelimit-remaining-tokens": "0",
      "x-ratelimit-reset-tokens": "100000000000000000000s",
    },
  },
  {
    name: "a reset a century away on an empty window",
    shape: "chat",
    headers: {
      "x-ratelimit-limit-tokens": "1000000",
      "x-ratelimit-remaining-tokens": "0",
      "x-ratelimit-reset-tokens": "876000h",
    },
  },
  { name: "a retry-after of three thousand years", shape: "chat", headers: { "retry-after": "99999999999" } },
  // Within the bounds, but on an answer the provider served: it asks no one to wait (one such
  // 200 kept every call of its key waiting a day, across restarts).
  { name: "a retry-after of a day on a 200", shape: "chat", headers: { "retry-after": "86400" } },
  {
    name: "a retry-after-ms of a day on a 200",
    shape: "messages",
    headers: { "retry-after-ms": "86400000" },
  },
  {
    name: "a retry-after-ms past 2^64",
    shape: "chat",
    headers: { "retry-after-ms": "18446744073709551616" },
  },
  {
    name: "more remaining than the limit",
    shape: "chat",
    headers: { "x-ratelimit-limit-tokens": "1000000", "x-ratelimit-remaining-tokens": "900000000000" },
  },
  {
    name: "Anthropic's reset in the year 9999 on an empty window",
    shape: "messages",
    headers: {
      "anthropic-ratelimit-input-tokens-limit": "1000000",
      "anthropic-ratelimit-input-tokens-remaining": "0",
      "anthropic-ratelimit-input-tokens-reset": "9999-12-31T23:59:59Z",
    },
  },
];

/** One call on `apiKey` through the official SDK of the shape; its reply text. */
async function ask(
  shape: Case["shape"],
  apiKey: string,
  runId: string,
  content: string,
  headers: Record<string, string> = {},
): Promise<string> {
  const all = { "X-Holdfast-Run": runId, ...headers };
  if (shape === "chat") {
    const answer = await stack.client({ apiKey, headers: all }).chat.completions.create({
      model: "gpt-4o-mini",
      max_tokens: 64,
      messages: [{ role: "user", content }],
    });
    return answer.choices[0]?.message.content ?? "";
  }
  const answer = await stack.anthropic({ apiKey, headers: all }).messages.create({
    model: "claude-3-5-haiku-20241022",
    max_tokens: 64,
    messages: [{ role: "user", content }],
  });
  return answer.content.map((block) => (block.type === "text" ? block.text : "")).join("");
}

describe.each(
  CASES.map((c, i) => ({ ...c, apiKey: `sk-absurd-${i}-${"0".repeat(24)}`, runId: `absurd-${i}` })),
)("an upstream answering $name", ({ shape, headers, apiKey, runId }) => {
  it("is answered and metered, its readings decode within bounds, and the next call on the key goes straight on", async () => {
    const started = Date.now();
    expect(await ask(shape, apiKey, runId, "absurd", { "x-fake-rate-limits": JSON.stringify(headers) })).toBe(
      "Fake reply to: absurd",
    );
    expect(await ask(shape, apiKey, runId, "ordinary")).toBe("Fake reply to: ordinary");

    const view: RunView = await stack.settled(runId, 2);
    expect(view).toMatchObject({ status: "idle", completed: 2, failed: 0 });
    expect(view.quarantined).toEqual([]);
    expect(view.steps.every((step) => step.inputTokens > 0 && step.costNanoUsd !== null)).toBe(true);
    // The next ordinary call's prediction: no wait, no checkpoint, figures a window can hold.
    const prediction = view.steps[1]?.prediction;
    expect(prediction).toMatchObject({ action: "continue", waitedMs: 0, resumeAtMs: 0 });
    expect(prediction!.limit).toBeLessThanOrEqual(MAX_COUNT);
    expect(prediction!.remaining).toBeLessThanOrEqual(MAX_COUNT);
    expect(prediction!.resetAtMs).toBeLessThanOrEqual(Date.now() + MAX_AHEAD_MS);

    // Every reading recorded for the key decodes, and keeps to the bounds.
    const subject = stack.bus.subjects.keyEvent(prediction!.keyId, "RateLimitObserved");
    const stored = await stack.bus.readRange(subject, 1, (await stack.bus.streamState()).lastSeq, 100);
    expect(stored.length).toBeGreaterThan(0);
    for (const message of stored) {
      const read = decodeStored(stack.bus.subjects, message);
      expect(read.quarantined).toBeUndefined();
      const envelope = read.envelope!;
      if (!isKnown(envelope) || envelope.payload.$case !== "rateLimitObserved")
        throw new Error("not a reading");
      const observed = envelope.payload.value;
      expect(observed.retryAfterMs).toBeLessThanOrEqual(MAX_AHEAD_MS);
      for (const window of [
        observed.requests,
        observed.tokens,
        observed.inputTokens,
        observed.outputTokens,
      ]) {
        if (window?.reported !== true) continue;
        expect(window.limit).toBeLessThanOrEqual(MAX_COUNT);
        expect(window.remaining).toBeGreaterThanOrEqual(0);
        expect(window.remaining).toBeLessThanOrEqual(window.limit > 0 ? window.limit : MAX_COUNT);
        expect(window.resetAtMs).toBeLessThanOrEqual(started + MAX_AHEAD_MS + 60_000);
      }
    }
  });
});

describe("a reading recorded before gateways bounded them", () => {
  it("does not shut its key's window: a gateway started on it and the fleet's coordinator go on", async () => {
    // A retry-after of three thousand years, as a gateway of an earlier version recorded it
    // (it decodes: under 2^53). The key is API_KEY's at the fake provider, which no call has used yet.
    const upstream = new URL(stack.provider.url).origin;
    const keyId = createHash("sha256").update(`${upstream}\n${API_KEY}`).digest("hex").slice(0, 16);
    const now = Date.now();
    // Recorded before shapes were read: no shape in it.
    const window = {
      reported: true,
      limit: 10_000_000,
      remaining: 10_000_000,
      resetAtMs: now + 60_000,
      shape: "",
      shapeReadings: 0,
    };
    const unreported = { reported: false, limit: 0, remaining: 0, resetAtMs: 0, shape: "", shapeReadings: 0 };
    const reading = makeEnvelope({
      id: `old-reading-${now}`,
      runId: "",
      sequence: 0,
      timestampMs: now,
      tag: "",
      payload: {
        $case: "rateLimitObserved",
        value: {
          keyId,
          upstream,
          requests: { ...window, limit: 10_000, remaining: 10_000 },
          tokens: window,
          inputTokens: unreported,
          outputTokens: unreported,
          retryAfterMs: 99_999_999_999_000,
          gateway: "a-gateway-of-an-earlier-version",
          asOfMs: now,
        },
      },
    });
    await publishRaw(
      stack.config.nats.url!,
      stack.bus.subjects.keyEvent(keyId, "RateLimitObserved"),
      encodeEnvelope(reading),
      {
        credentials: stack.credentials?.files.admin,
      },
    );
    // Started now, the gateway learns the key's last reading before it serves a call.
    const gateway = await stack.extraGateway({});
    try {
      const answer = await gateway.client({ "X-Holdfast-Run": "old-reading" }).chat.completions.create({
        model: "gpt-4o-mini",
        max_tokens: 64,
        messages: [{ role: "user", content: "still open" }],
      });
      expect(answer.choices[0]?.message.content).toBe("Fake reply to: still open");
      const view = await stack.settled("old-reading", 1);
      expect(view.steps[0]?.prediction).toMatchObject({ action: "continue", keyId, waitedMs: 0 });
    } finally {
      await gateway.close();
    }
  });
});

describe("after every absurd upstream", () => {
  it("the gateway says what it did not believe, naming the header", () => {
    const lines = stack
      .logs()
      .split("\n")
      .filter((line) => line.includes("rate-limit headers past their bounds"));
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.join("\n")).toContain("x-ratelimit-limit-tokens");
  });
});
