import { describe, expect, it } from "vitest";
import { type ChatMessage, type Conversation, fragments, planReply, words } from "./reply.js";

function conversation(
  messages: readonly ChatMessage[],
  options: { tools?: readonly string[]; maxTokens?: number } = {},
): Conversation {
  return { messages, callableTools: new Set(options.tools ?? []), maxTokens: options.maxTokens };
}

describe("planReply", () => {
  it("quotes the last user message, the same way every time", () => {
    const chat = conversation([
      { role: "user", content: "first" },
      { role: "assistant", content: "ok" },
      { role: "user", content: [{ type: "text", text: "second" }] },
    ]);
    const reply = planReply(chat, "seed");
    expect(reply).toEqual({
      content: "Fake reply to: second",
      toolCalls: [],
      finishReason: "stop",
      completionTokens: 6,
    });
    expect(planReply(chat, "seed")).toEqual(reply);
  });

  it("quotes at most 200 characters", () => {
    const reply = planReply(conversation([{ role: "user", content: "x".repeat(500) }]), "seed");
    expect(reply.content).toBe(`Fake reply to: ${"x".repeat(200)}`);
  });

  it("cuts the reply at max_tokens and says so", () => {
    const reply = planReply(
      conversation([{ role: "user", content: "a long question indeed" }], { maxTokens: 3 }),
      "seed",
    );
    expect(reply).toMatchObject({ content: "Fake reply t", finishReason: "length", completionTokens: 3 });
  });

  it("calls the tools a directive names, when the request declares them, each with its own seed", () => {
    const reply = planReply(
      conversation(
        [{ role: "user", content: 'Go [[call:get_weather {"city":"Paris"}]] [[call:get_weather]]' }],
        { tools: ["get_weather"] },
      ),
      "seed",
    );
    expect(reply.content).toBeNull();
    expect(reply.finishReason).toBe("tool_calls");
    expect(reply.toolCalls).toEqual([
      { seed: expect.stringMatching(/^[0-9a-f]{64}$/), name: "get_weather", arguments: '{"city":"Paris"}' },
      { seed: expect.stringMatching(/^[0-9a-f]{64}$/), name: "get_weather", arguments: "{}" },
    ]);
    expect(reply.toolCalls[0]!.seed).not.toBe(reply.toolCalls[1]!.seed);
    expect(
      planReply(
        conversation([{ role: "user", content: "[[call:get_weather]]" }], { tools: ["get_weather"] }),
        "other",
      ).toolCalls[0]!.seed,
    ).not.toBe(reply.toolCalls[1]!.seed);
  });

  it("answers in words when the named tool is not callable", () => {
    const messages = [{ role: "user", content: "[[call:get_weather]]" }];
    expect(planReply(conversation(messages), "seed").content).toBe("Fake reply to: [[call:get_weather]]");
  });

  it("answers a tool result in words", () => {
    const reply = planReply(
      conversation(
        [
          { role: "user", content: "[[call:get_weather]]" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "c", type: "function", function: { name: "get_weather", arguments: "{}" } }],
          },
          { role: "tool", tool_call_id: "c", content: "sunny" },
        ],
        { tools: ["get_weather"] },
      ),
      "seed",
    );
    expect(reply).toMatchObject({ content: "Fake reply to tool result: sunny", finishReason: "stop" });
  });
});

describe("words", () => {
  it("splits text into words that join back to the text", () => {
    expect(words("Fake reply to:  two\nlines ")).toEqual(["Fake ", "reply ", "to:  ", "two\n", "lines "]);
    expect(words(" lead").join("")).toBe(" lead");
  });
});

describe("fragments", () => {
  it("cuts text into pieces of eight characters that join back to the text", () => {
    expect(fragments('{"city":"Paris"}')).toEqual(['{"city":', '"Paris"}']);
    expect(fragments("")).toEqual([]);
  });
});
