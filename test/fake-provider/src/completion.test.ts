import { describe, expect, it } from "vitest";
import { type CompletionHead, completionId, planReply, streamEvents, usageOf, words } from "./completion.js";
import { toChatRequest } from "./request.js";
import { type Chunk, chunksOf } from "./test-client.js";

const weatherTool = { type: "function", function: { name: "get_weather", parameters: { type: "object" } } };

function request(body: Record<string, unknown>) {
  return toChatRequest({ model: "gpt-4o-mini", ...body });
}

const head: CompletionHead = {
  id: "chatcmpl-x",
  created: 1,
  model: "gpt-4o-mini",
  system_fingerprint: "fp_x",
};

/** The JSON chunks of a stream, each event's framing checked. */
function chunks(events: readonly string[]): Chunk[] {
  for (const event of events) expect(event).toMatch(/^data: .*\n\n$/s);
  return chunksOf(events.map((event) => event.slice("data: ".length, -2)));
}

describe("planReply", () => {
  it("quotes the last user message, the same way every time", () => {
    const chat = request({
      messages: [
        { role: "user", content: "first" },
        { role: "assistant", content: "ok" },
        { role: "user", content: [{ type: "text", text: "second" }] },
      ],
    });
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
    const reply = planReply(request({ messages: [{ role: "user", content: "x".repeat(500) }] }), "seed");
    expect(reply.content).toBe(`Fake reply to: ${"x".repeat(200)}`);
  });

  it("cuts the reply at max_tokens and says so", () => {
    const reply = planReply(
      request({ max_tokens: 3, messages: [{ role: "user", content: "a long question indeed" }] }),
      "seed",
    );
    expect(reply).toMatchObject({ content: "Fake reply t", finishReason: "length", completionTokens: 3 });
  });

  it("calls the tools a directive names, when the request declares them", () => {
    const reply = planReply(
      request({
        tools: [weatherTool],
        messages: [
          { role: "user", content: 'Go [[call:get_weather {"city":"Paris"}]] [[call:get_weather]]' },
        ],
      }),
      "seed",
    );
    expect(reply.content).toBeNull();
    expect(reply.finishReason).toBe("tool_calls");
    expect(reply.toolCalls).toEqual([
      {
        id: expect.stringMatching(/^call_\w{24}$/),
        type: "function",
        function: { name: "get_weather", arguments: '{"city":"Paris"}' },
      },
      {
        id: expect.stringMatching(/^call_\w{24}$/),
        type: "function",
        function: { name: "get_weather", arguments: "{}" },
      },
    ]);
    expect(reply.toolCalls[0]!.id).not.toBe(reply.toolCalls[1]!.id);
  });

  it("answers in words when the named tool is not declared, or tool_choice is none", () => {
    const messages = [{ role: "user", content: "[[call:get_weather]]" }];
    expect(planReply(request({ messages }), "seed").content).toBe("Fake reply to: [[call:get_weather]]");
    expect(planReply(request({ messages, tools: [weatherTool], tool_choice: "none" }), "seed").content).toBe(
      "Fake reply to: [[call:get_weather]]",
    );
  });

  it("answers a tool result in words", () => {
    const reply = planReply(
      request({
        tools: [weatherTool],
        messages: [
          { role: "user", content: "[[call:get_weather]]" },
          {
            role: "assistant",
            content: null,
            tool_calls: [{ id: "c", type: "function", function: { name: "get_weather", arguments: "{}" } }],
          },
          { role: "tool", tool_call_id: "c", content: "sunny" },
        ],
      }),
      "seed",
    );
    expect(reply).toMatchObject({ content: "Fake reply to tool result: sunny", finishReason: "stop" });
  });
});

describe("completionId", () => {
  it("is the same for the same body whatever the order of its keys", () => {
    const a = completionId({ model: "m", messages: [{ role: "user", content: "x" }] });
    expect(a).toMatch(/^chatcmpl-\w{29}$/);
    expect(completionId({ messages: [{ content: "x", role: "user" }], model: "m" })).toBe(a);
    expect(completionId({ model: "m", messages: [{ role: "user", content: "y" }] })).not.toBe(a);
  });
});

describe("streamEvents", () => {
  const chat = request({ messages: [{ role: "user", content: "what is the weather like" }] });
  const reply = planReply(chat, "seed");
  const usage = usageOf(12, reply.completionTokens, 0);

  it("opens with the role, sends the words, then an empty delta with the finish reason", () => {
    const stream = chunks(streamEvents(head, reply, usage, false));
    expect(stream[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "", refusal: null });
    const pieces = stream.slice(1, -1).map((chunk) => chunk.choices[0]!.delta.content);
    expect(pieces.length).toBeGreaterThanOrEqual(3);
    expect(pieces.join("")).toBe(reply.content);
    expect(stream.at(-1)!.choices[0]).toEqual({ index: 0, delta: {}, logprobs: null, finish_reason: "stop" });
    for (const chunk of stream) {
      expect(chunk).toMatchObject({
        id: "chatcmpl-x",
        object: "chat.completion.chunk",
        model: "gpt-4o-mini",
      });
      expect(chunk).not.toHaveProperty("usage");
    }
  });

  it("with include_usage, puts usage null on every chunk and the usage on a last chunk without choices", () => {
    const stream = chunks(streamEvents(head, reply, usage, true));
    const last = stream.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual(usage);
    for (const chunk of stream.slice(0, -1)) expect(chunk.usage).toBeNull();
    expect(stream.at(-2)!.choices[0]!.finish_reason).toBe("stop");
  });

  it("streams tool calls as OpenAI does: name and id first, then argument fragments", () => {
    const toolReply = planReply(
      request({
        tools: [weatherTool],
        messages: [
          {
            role: "user",
            content: '[[call:get_weather {"city":"Paris","unit":"celsius"}]] [[call:get_weather]]',
          },
        ],
      }),
      "seed",
    );
    const stream = chunks(streamEvents(head, toolReply, usage, false));
    expect(stream[0]!.choices[0]!.delta).toEqual({
      role: "assistant",
      content: null,
      tool_calls: [
        {
          index: 0,
          id: toolReply.toolCalls[0]!.id,
          type: "function",
          function: { name: "get_weather", arguments: "" },
        },
      ],
      refusal: null,
    });

    const calls = new Map<number, { id?: string; name?: string; arguments: string }>();
    for (const chunk of stream) {
      for (const call of chunk.choices[0]!.delta.tool_calls ?? []) {
        const seen = calls.get(call.index) ?? { arguments: "" };
        calls.set(call.index, {
          id: seen.id ?? call.id,
          name: seen.name ?? call.function.name,
          arguments: seen.arguments + call.function.arguments,
        });
      }
    }
    expect([...calls.values()]).toEqual(
      toolReply.toolCalls.map((call) => ({
        id: call.id,
        name: call.function.name,
        arguments: call.function.arguments,
      })),
    );
    expect(stream.length).toBeGreaterThan(4);
    expect(stream.at(-1)!.choices[0]).toMatchObject({ delta: {}, finish_reason: "tool_calls" });
  });
});

describe("words", () => {
  it("splits text into words that join back to the text", () => {
    expect(words("Fake reply to:  two\nlines ")).toEqual(["Fake ", "reply ", "to:  ", "two\n", "lines "]);
    expect(words(" lead").join("")).toBe(" lead");
  });
});
