import { describe, expect, it } from "vitest";
import { PromptCache } from "./prompt-cache.js";
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
