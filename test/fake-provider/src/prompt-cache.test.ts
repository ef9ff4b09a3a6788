import { describe, expect, it } from "vitest";
import { PromptCache, type PromptSegment, wholeBlocks } from "./prompt-cache.js";
import { promptTokens } from "./tokens.js";

const system = { role: "system", content: "You are a careful agent. ".repeat(40) };
const first = [system, { role: "user", content: "Step one." }];
const second = [...first, { role: "assistant", content: "Done." }, { role: "user", content: "Step two." }];

describe("PromptCache", () => {
  it("serves the earlier prompt's tokens, in whole blocks of 64, when a prompt extends it", () => {
    const cache = new PromptCache();
    expect(cache.serve("sk-a", first, promptTokens(first))).toBe(0);

    const cached = cache.serve("sk-a", second, promptTokens(second));

    expect(promptTokens(first)).toBe(263);
    expect(cached).toBe(256);
  });

  it("caches nothing below one block", () => {
    const cache = new PromptCache();
    const short = [{ role: "user", content: "hi" }];
    cache.serve("sk-a", short, promptTokens(short));
    const longer = [...short, { role: "assistant", content: "hello" }, { role: "user", content: "again" }];
    expect(cache.serve("sk-a", longer, promptTokens(longer))).toBe(0);
  });

  it("keeps each key's prompts apart", () => {
    const cache = new PromptCache();
    cache.serve("sk-a", first, promptTokens(first));
    expect(cache.serve("sk-b", second, promptTokens(second))).toBe(0);
  });

  it("needs a strict prefix: the same prompt again, or a changed message, is not a hit", () => {
    const cache = new PromptCache();
    cache.serve("sk-a", first, promptTokens(first));
    expect(cache.serve("sk-a", first, promptTokens(first))).toBe(0);
    const edited = [system, { role: "user", content: "Step one!" }, { role: "user", content: "more" }];
    expect(cache.serve("sk-a", edited, promptTokens(edited))).toBe(0);
  });

  it("matches messages whatever the order of their keys", () => {
    const cache = new PromptCache();
    cache.serve("sk-a", first, promptTokens(first));
    const reordered = [
      { content: system.content, role: "system" },
      { content: "Step one.", role: "user" },
    ];
    const extended = [...reordered, { role: "user", content: "next" }];
    expect(cache.serve("sk-a", extended, promptTokens(extended))).toBe(256);
  });
});

const segment = (value: string, tokens: number, breakpoint = false): PromptSegment => ({
  value,
  tokens,
  breakpoint,
});

describe("PromptCache.serveBreakpoints", () => {
  const prompt = [segment("system", 100, true), segment("question", 20)];

  it("writes the prefix up to a breakpoint, then a prompt starting with it reads it, exactly", () => {
    const cache = new PromptCache();
    expect(cache.serveBreakpoints("sk-a", prompt)).toEqual({ read: 0, written: 100 });
    expect(cache.serveBreakpoints("sk-a", prompt)).toEqual({ read: 100, written: 0 });
    expect(cache.serveBreakpoints("sk-a", [prompt[0]!, segment("other question", 30)])).toEqual({
      read: 100,
      written: 0,
    });
    expect(cache.serveBreakpoints("sk-b", prompt)).toEqual({ read: 0, written: 100 });
  });

  it("caches nothing without a breakpoint, or below 64 tokens", () => {
    const cache = new PromptCache();
    const unmarked = [segment("system", 100), segment("question", 20)];
    expect(cache.serveBreakpoints("sk-a", unmarked)).toEqual({ read: 0, written: 0 });
    expect(cache.serveBreakpoints("sk-a", unmarked)).toEqual({ read: 0, written: 0 });
    const short = [segment("short", 63, true)];
    expect(cache.serveBreakpoints("sk-a", short)).toEqual({ read: 0, written: 0 });
    expect(cache.serveBreakpoints("sk-a", short)).toEqual({ read: 0, written: 0 });
  });

  it("reads what an earlier turn wrote when the breakpoint has moved on, and writes the rest", () => {
    const cache = new PromptCache();
    cache.serveBreakpoints("sk-a", [segment("system", 100), segment("turn 1", 20, true)]);
    const next = [
      segment("system", 100),
      segment("turn 1", 20),
      segment("reply 1", 10),
      segment("turn 2", 5, true),
    ];
    expect(cache.serveBreakpoints("sk-a", next)).toEqual({ read: 120, written: 15 });
  });

  it("does not read past the last breakpoint, nor from a prompt that differs before it", () => {
    const cache = new PromptCache();
    cache.serveBreakpoints("sk-a", [segment("a", 100, true), segment("b", 100, true)]);
    expect(cache.serveBreakpoints("sk-a", [segment("a", 100, true), segment("b", 100)])).toEqual({
      read: 100,
      written: 0,
    });
    expect(cache.serveBreakpoints("sk-a", [segment("z", 100), segment("b", 100, true)])).toEqual({
      read: 0,
      written: 200,
    });
  });

  it("peeks without writing", () => {
    const cache = new PromptCache();
    expect(cache.peekBreakpoints("sk-a", prompt)).toEqual({ read: 0, written: 100 });
    expect(cache.peekBreakpoints("sk-a", prompt)).toEqual({ read: 0, written: 100 });
  });
});

describe("wholeBlocks", () => {
  it("rounds down to 64-token blocks", () => {
    expect([0, 63, 64, 130].map(wholeBlocks)).toEqual([0, 0, 64, 128]);
  });
});
