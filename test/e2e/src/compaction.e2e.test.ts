import { type RunningControl, startControl } from "@holdfast/control";
import { createLogger } from "@holdfast/log";
import type OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Stack, startStack } from "./stack.js";

// The overflow wall: a conversation grown past its key's whole window. With
// predict.compaction: summarize the gateway summarizes the run's oldest messages (in parts
// that each fit the window, one after another as it refills), records the compaction, and
// sends the call (and every later call of the run) compacted; the agent never knows. An
// operator's resume --compact truncate does the same by dropping them.
let stack: Stack;
let control: RunningControl;
const TOKEN = "control-token-for-compaction-tests-0";
// 6,000 tokens, refilled in 6 s (1,000 a second).
const KEY_WALL = "sk-wall-00000000000000000000000000";
const KEY_ROOMY = "sk-roomy-0000000000000000000000000";

beforeAll(async () => {
  stack = await startStack({
    config: {
      predict: { compaction: "summarize", compaction_keep: 2, wait_threshold_s: 5, max_wait_s: 60 },
      hold: { keepalive_ms: 1_000 },
    },
    provider: { limitsByKey: { [KEY_WALL]: { tpm: 6_000, windowMs: 6_000 } } },
  });
  control = await startControl(
    {
      ...stack.configFor("control"),
      control: { ...stack.config.control, port: 0, grpc_port: 0, token: TOKEN },
    },
    createLogger({ name: "control", level: "silent" }),
  );
});
afterAll(async () => {
  await control?.close();
  await stack?.close();
});

type Message = OpenAI.Chat.ChatCompletionMessageParam;

/** A conversation of `turns` user/assistant pairs, each message about `chars` characters. */
function conversation(turns: number, chars: number): Message[] {
  const messages: Message[] = [{ role: "system", content: "You are a careful agent." }];
  for (let i = 0; i < turns; i++) {
    messages.push({ role: "user", content: `fact ${i}: ${"u".repeat(chars)}` });
    messages.push({ role: "assistant", content: `noted ${i}: ${"a".repeat(chars)}` });
  }
  return messages;
}

const sentTo = (apiKey: string) =>
  stack.provider.requests
    .filter((r) => r.apiKey === apiKey)
    .map((r) => ({
      status: r.status,
      messages: (r.body as { messages: { role: string; content: string }[] }).messages,
    }));

describe("compaction", () => {
  it("a call past its key's whole window is sent with its oldest messages summarized, and so is every later call", async () => {
    const agent = stack.client({ apiKey: KEY_WALL, headers: { "X-Holdfast-Run": "wall" } });
    // 12 turns of ~1,000 characters: ~6,100 input tokens, more than the whole window.
    // The agent's early steps: its key's window is known from their answers.
    await agent.chat.completions.create({
      model: "gpt-4o-mini",
      max_tokens: 20,
      messages: [{ role: "user", content: "start" }],
    });
    const history = conversation(12, 1_000);
    history.push({ role: "user", content: "what was fact 3?" });
    const first = await agent.chat.completions.create({
      model: "gpt-4o-mini",
      max_tokens: 50,
      messages: history,
    });
    expect(first.choices[0]?.message.content).toBeTruthy();

    const sent = sentTo(KEY_WALL);
    expect(sent.every((r) => r.status === 200)).toBe(true);
    // The summary was written in parts, each within half the window.
    const summaries = sent.filter((r) =>
      r.messages[0]?.content.startsWith("You compact an AI agent's conversation"),
    );
    expect(summaries.length).toBeGreaterThanOrEqual(2);
    const call = sent.at(-1)!.messages;
    // System prompt, the summary, the last two messages kept.
    expect(call.map((m) => m.role)).toEqual(["system", "user", "assistant", "user"]);
    expect(call[1]?.content).toMatch(/^\[Summary of the earlier conversation\]\n/);
    expect(call[3]?.content).toBe("what was fact 3?");

    let run = await stack.settled("wall", 2);
    const compactions = run.control.filter((c) => c.what === "compacted");
    expect(compactions).toHaveLength(1);
    expect(compactions[0]?.compaction).toMatchObject({
      mode: "summarize",
      why: "too_large",
      messagesBefore: 26,
      messagesAfter: 4,
      prefixMessages: 23,
      summaryModel: "gpt-4o-mini",
    });
    const k = compactions[0]!.compaction!;
    expect(k.tokensAfter).toBeLessThan(k.tokensBefore / 3);
    expect(k.summaryInputTokens).toBeGreaterThan(k.tokensBefore / 2);

    // The agent goes on with its whole history: the gateway sends it compacted the same way.
    history.push({ role: "assistant", content: first.choices[0]!.message.content! });
    history.push({ role: "user", content: "and fact 7?" });
    await agent.chat.completions.create({ model: "gpt-4o-mini", max_tokens: 50, messages: history });
    const again = sentTo(KEY_WALL).at(-1)!.messages;
    expect(again.map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant", "user"]);
    expect(again[1]?.content).toBe(call[1]?.content);
    run = await stack.settled("wall", 3);
    expect(run.control.filter((c) => c.what === "compacted")).toHaveLength(1);
    expect(run.steps.map((s) => s.status)).toEqual(["completed", "completed", "completed"]);
  }, 90_000);

  it("an operator's resume --compact truncate drops the oldest messages before the run's next call", async () => {
    const agent = stack.client({ apiKey: KEY_ROOMY, headers: { "X-Holdfast-Run": "operator-compact" } });
    const history = conversation(5, 100);
    history.push({ role: "user", content: "go on" });
    await agent.chat.completions.create({ model: "gpt-4o-mini", max_tokens: 20, messages: history });
    await stack.settled("operator-compact", 1);

    const response = await fetch(`${control.url}/runs/operator-compact/resume`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ reason: "context too long", compact: "truncate" }),
    });
    expect(response.status).toBe(200);
    // The gateway sees the resume as its run state follows the log.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    history.push({ role: "assistant", content: "ok" }, { role: "user", content: "next" });
    await agent.chat.completions.create({ model: "gpt-4o-mini", max_tokens: 20, messages: history });
    expect(
      sentTo(KEY_ROOMY)
        .at(-1)!
        .messages.map((m) => m.content),
    ).toEqual(["You are a careful agent.", "ok", "next"]);

    history.push({ role: "assistant", content: "done" }, { role: "user", content: "last" });
    await agent.chat.completions.create({ model: "gpt-4o-mini", max_tokens: 20, messages: history });
    expect(
      sentTo(KEY_ROOMY)
        .at(-1)!
        .messages.map((m) => m.content),
    ).toEqual(["You are a careful agent.", "ok", "next", "done", "last"]);

    const run = await stack.settled("operator-compact", 3);
    const resumed = run.control.find((c) => c.what === "resumed");
    expect(resumed?.compact).toBe("truncate");
    const compacted = run.control.filter((c) => c.what === "compacted");
    expect(compacted).toHaveLength(1);
    expect(compacted[0]?.compaction).toMatchObject({
      mode: "truncate",
      why: "operator",
      messagesBefore: 14,
      messagesAfter: 3,
      prefixMessages: 11,
      summaryModel: "",
    });
  }, 30_000);

  it("refuses a compaction by selector, and an unknown mode, with a clear error", async () => {
    const bySelector = await fetch(`${control.url}/resume`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ tag: "x", compact: "truncate" }),
    });
    expect(bySelector.status).toBe(400);
    const unknown = await fetch(`${control.url}/runs/operator-compact/resume`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ compact: "shrink" }),
    });
    expect(unknown.status).toBe(400);
    expect(JSON.stringify(await unknown.json())).toMatch(/compact must be summarize or truncate/);
  });
});
