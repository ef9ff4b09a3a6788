import { describe, expect, it } from "vitest";
import { planReply } from "../reply.js";
import { type Chunk, chunksOf } from "../test-client.js";
import {
  type CompletionHead,
  completionBody,
  completionId,
  streamEvents,
  toolCallOf,
  usageOf,
} from "./completion.js";
import { toChatRequest } from "./request.js";

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

describe("toChatRequest and planReply", () => {
  it("calls the tools a directive names only when the request declares them, and not with tool_choice none", () => {
    const messages = [{ role: "user", content: "[[call:get_weather]]" }];
    expect(planReply(request({ messages }), "seed").content).toBe("Fake reply to: [[call:get_weather]]");
    expect(planReply(request({ messages, tools: [weatherTool], tool_choice: "none" }), "seed").content).toBe(
      "Fake reply to: [[call:get_weather]]",
    );
    expect(planReply(request({ messages, tools: [weatherTool] }), "seed").toolCalls).toHaveLength(1);
  });
});

describe("completionBody", () => {
  it("writes tool calls with call_ ids and the arguments as JSON text", () => {
    const reply = planReply(
      request({
        tools: [weatherTool],
        messages: [{ role: "user", content: '[[call:get_weather {"city":"Paris"}]]' }],
      }),
      "seed",
    );
    const body = JSON.parse(completionBody(head, reply, usageOf(1, reply.completionTokens, 0)));
    expect(body.choices[0]).toEqual({
      index: 0,
      message: {
        role: "assistant",
        content: null,
        tool_calls: [
          {
            id: expect.stringMatching(/^call_\w{24}$/),
            type: "function",
            function: { name: "get_weather", arguments: '{"city":"Paris"}' },
          },
        ],
        refusal: null,
        annotations: [],
      },
      logprobs: null,
      finish_reason: "tool_calls",
    });
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
          id: toolCallOf(toolReply.toolCalls[0]!).id,
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
      toolReply.toolCalls.map(toolCallOf).map((call) => ({
        id: call.id,
        name: call.function.name,
        arguments: call.function.arguments,
      })),
    );
    expect(stream.length).toBeGreaterThan(4);
    expect(stream.at(-1)!.choices[0]).toMatchObject({ delta: {}, finish_reason: "tool_calls" });
  });
});
