import { describe, expect, it } from "vitest";
import { anthropicConversation } from "./anthropic-messages/conversation.js";
import { applyCompaction, planCompaction, prefixHash } from "./conversation.js";
import { chatConversation } from "./openai-chat/conversation.js";
import { responsesConversation } from "./openai-responses/conversation.js";

describe("compacting a conversation", () => {
  it("keeps the system prompts and the last messages, and never starts the kept part at a tool's result", () => {
    const messages = [
      { role: "system", content: "s" },
      { role: "user", content: "u1" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }],
      },
      { role: "tool", tool_call_id: "c1", content: "r1" },
      { role: "assistant", content: "a1" },
      { role: "user", content: "u2" },
    ];
    expect(planCompaction(chatConversation, messages, 2)).toMatchObject({ start: 1, end: 4 });
    // Keeping 3 would start at the tool's result: the assistant turn that asked for it is kept too.
    expect(planCompaction(chatConversation, messages, 3)).toMatchObject({ start: 1, end: 2 });
    expect(planCompaction(chatConversation, messages, 5)).toBeUndefined();
  });

  it("starts an Anthropic conversation's kept part at a user turn that is no tool result", () => {
    const messages = [
      { role: "user", content: "u1" },
      { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "f", input: {} }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "r" }] },
      { role: "assistant", content: "a" },
      { role: "user", content: "u2" },
    ];
    expect(planCompaction(anthropicConversation, messages, 1)).toMatchObject({ start: 0, end: 4 });
    expect(planCompaction(anthropicConversation, messages, 2)).toBeUndefined();
  });

  it("sends a later conversation compacted when it starts with the replaced messages, and leaves others alone", () => {
    const dropped = [
      { role: "user", content: "u1" },
      { role: "assistant", content: "a1" },
    ];
    const summary = chatConversation.summaryMessage("earlier: u1, a1");
    const compaction = { hash: prefixHash(dropped), count: 2, replacement: [summary] };
    const later = {
      model: "m",
      messages: [{ role: "system", content: "s" }, ...dropped, { role: "user", content: "u2" }],
    };
    expect(applyCompaction(chatConversation, later, compaction)?.messages).toEqual([
      { role: "system", content: "s" },
      summary,
      { role: "user", content: "u2" },
    ]);
    const other = {
      messages: [
        { role: "user", content: "different" },
        { role: "user", content: "u2" },
      ],
    };
    expect(applyCompaction(chatConversation, other, compaction)).toBeUndefined();
  });

  it("reads each shape's summary answer", () => {
    expect(
      chatConversation.summaryOf({
        choices: [{ message: { content: "sum" } }],
        usage: { prompt_tokens: 10, completion_tokens: 2 },
      }),
    ).toMatchObject({ text: "sum", usage: { inputTokens: 10, outputTokens: 2 } });
    expect(
      anthropicConversation.summaryOf({
        content: [{ type: "text", text: "sum" }],
        usage: { input_tokens: 7, output_tokens: 3 },
      }),
    ).toMatchObject({ text: "sum", usage: { inputTokens: 7, outputTokens: 3 } });
    expect(
      responsesConversation.summaryOf({
        output: [{ type: "message", content: [{ type: "output_text", text: "sum" }] }],
        usage: { input_tokens: 5, output_tokens: 1 },
      }),
    ).toMatchObject({ text: "sum", usage: { inputTokens: 5, outputTokens: 1 } });
    expect(chatConversation.summaryOf({ choices: [{ message: { content: "" } }] })).toBeUndefined();
  });
});
