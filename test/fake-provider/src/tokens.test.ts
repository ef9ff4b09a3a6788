import { describe, expect, it } from "vitest";
import { contentText, estimateTokens, promptTokens } from "./tokens.js";

describe("estimateTokens", () => {
  it("counts a token per four characters, rounded up", () => {
    expect(estimateTokens("")).toBe(0);
    expect(estimateTokens("abcd")).toBe(1);
    expect(estimateTokens("abcde")).toBe(2);
  });
});

describe("contentText", () => {
  it("reads string content, and the text parts of array content", () => {
    expect(contentText("hi")).toBe("hi");
    expect(
      contentText([
        { type: "text", text: "one" },
        { type: "image_url", image_url: { url: "data:," } },
        { type: "text", text: "two" },
      ]),
    ).toBe("one\ntwo");
    expect(contentText(null)).toBe("");
  });
});

describe("promptTokens", () => {
  it("is 2 plus, per message, 4 and a token per four characters of its text", () => {
    const messages = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hello there, how are you?" },
    ];
    // 2 + (4 + ceil(9 / 4)) + (4 + ceil(25 / 4))
    expect(promptTokens(messages)).toBe(2 + 7 + 11);
  });

  it("gives the same count for the same request, however often it is asked", () => {
    const messages = [{ role: "user", content: [{ type: "text", text: "same words" }] }];
    expect(promptTokens(messages)).toBe(promptTokens(structuredClone(messages)));
    expect(promptTokens(messages)).toBe(promptTokens([{ role: "user", content: "same words" }]));
  });

  it("counts the tool calls of assistant messages and the declared tools", () => {
    const call = {
      role: "assistant",
      content: null,
      tool_calls: [{ function: { name: "f", arguments: "{}" } }],
    };
    expect(promptTokens([call])).toBe(2 + 4 + 1);

    const tools = [{ type: "function", function: { name: "get_weather" } }];
    const withTools = promptTokens([{ role: "user", content: "x" }], tools);
    expect(withTools).toBe(
      promptTokens([{ role: "user", content: "x" }]) + estimateTokens(JSON.stringify(tools)),
    );
  });
});
