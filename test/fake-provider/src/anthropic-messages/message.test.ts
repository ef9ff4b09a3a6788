import { describe, expect, it } from "vitest";
import { callDirective } from "../directives.js";
import { planReply } from "../reply.js";
import { parseEvents } from "../test-client.js";
import { type MessagePlan, messageBody, messageEvents, messageId, usageOf } from "./message.js";
import { toMessagesRequest } from "./request.js";

const tool = { name: "get_weather", input_schema: { type: "object" } };
const usage = usageOf({ tokens: 100, cacheRead: 60, cacheWritten: 30, cacheTtl: "5m" }, 10);

function plan(body: Record<string, unknown>): MessagePlan {
  const request = toMessagesRequest(
    { model: "claude-sonnet-4-5", max_tokens: 100, ...body },
    { countOnly: false },
  );
  const reply = planReply(request, "msg_x");
  return {
    id: "msg_x",
    model: request.model,
    reply,
    usage: { ...usage, output_tokens: reply.completionTokens },
  };
}

type Event = { type: string; [field: string]: unknown };

function events(of: MessagePlan): Array<{ event: string | undefined; data: Event }> {
  return parseEvents(messageEvents(of)).map(({ event, data }) => {
    expect((data as Event).type).toBe(event);
    return { event, data: data as Event };
  });
}

describe("messageId", () => {
  it("looks like Anthropic's and is never the same twice", () => {
    expect(messageId()).toMatch(/^msg_01[0-9A-Za-z]{22}$/);
    expect(messageId()).not.toBe(messageId());
  });
});

describe("usageOf", () => {
  it("leaves what was read from and written to the cache out of input_tokens, the writes split by ttl", () => {
    expect(usage).toMatchObject({
      input_tokens: 10,
      cache_read_input_tokens: 60,
      cache_creation_input_tokens: 30,
      cache_creation: { ephemeral_5m_input_tokens: 30, ephemeral_1h_input_tokens: 0 },
      output_tokens: 10,
    });
    expect(usageOf({ tokens: 50, cacheRead: 0, cacheWritten: 40, cacheTtl: "1h" }, 1).cache_creation).toEqual(
      {
        ephemeral_5m_input_tokens: 0,
        ephemeral_1h_input_tokens: 40,
      },
    );
  });
});

describe("messageBody", () => {
  it("maps the reply's finish onto Anthropic's stop reasons", () => {
    const text = JSON.parse(messageBody(plan({ messages: [{ role: "user", content: "hi" }] })));
    const cut = JSON.parse(messageBody(plan({ max_tokens: 2, messages: [{ role: "user", content: "hi" }] })));
    const call = JSON.parse(
      messageBody(
        plan({
          tools: [tool],
          messages: [{ role: "user", content: callDirective("get_weather", { a: 1 }) }],
        }),
      ),
    );
    expect(text).toMatchObject({
      stop_reason: "end_turn",
      content: [{ type: "text", text: "Fake reply to: hi" }],
    });
    expect(cut).toMatchObject({ stop_reason: "max_tokens", content: [{ type: "text", text: "Fake rep" }] });
    expect(call).toMatchObject({
      stop_reason: "tool_use",
      content: [
        {
          type: "tool_use",
          id: expect.stringMatching(/^toolu_01\w{22}$/),
          name: "get_weather",
          input: { a: 1 },
        },
      ],
    });
  });
});

describe("messageEvents", () => {
  it("opens with the message and the prompt's usage, pings after the first block opens, and closes with the stop reason", () => {
    const text = plan({ messages: [{ role: "user", content: "what is the weather like" }] });
    const stream = events(text);

    expect(stream.map((event) => event.event)).toEqual([
      "message_start",
      "content_block_start",
      "ping",
      ...Array(8).fill("content_block_delta"),
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(stream[0]!.data.message).toMatchObject({
      id: "msg_x",
      content: [],
      stop_reason: null,
      usage: {
        input_tokens: 10,
        cache_read_input_tokens: 60,
        cache_creation_input_tokens: 30,
        output_tokens: 1,
      },
    });
    expect(stream[1]!.data).toEqual({
      type: "content_block_start",
      index: 0,
      content_block: { type: "text", text: "", citations: null },
    });
    const deltas = stream
      .filter((event) => event.event === "content_block_delta")
      .map((event) => event.data.delta);
    expect(deltas.map((delta) => (delta as { text: string }).text).join("")).toBe(text.reply.content);
    expect(stream.at(-2)!.data).toMatchObject({
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: { output_tokens: text.reply.completionTokens },
    });
  });

  it("streams each tool_use block's input as JSON fragments, the first one empty", () => {
    const calls = plan({
      tools: [tool],
      messages: [
        {
          role: "user",
          content: `${callDirective("get_weather", { city: "Paris", unit: "celsius" })} ${callDirective("get_weather")}`,
        },
      ],
    });
    const stream = events(calls).map((event) => event.data);

    const starts = stream.filter((event) => event.type === "content_block_start");
    expect(
      starts.map((event) => [event.index, (event.content_block as { type: string; input: unknown }).input]),
    ).toEqual([
      [0, {}],
      [1, {}],
    ]);
    const first = stream
      .filter((event) => event.type === "content_block_delta" && event.index === 0)
      .map((event) => event.delta as { type: string; partial_json: string });
    expect(first[0]).toEqual({ type: "input_json_delta", partial_json: "" });
    expect(first.length).toBeGreaterThanOrEqual(5);
    expect(JSON.parse(first.map((delta) => delta.partial_json).join(""))).toEqual({
      city: "Paris",
      unit: "celsius",
    });
    expect(stream.filter((event) => event.type === "ping")).toHaveLength(1);
    expect(stream.at(-2)).toMatchObject({ delta: { stop_reason: "tool_use" } });
  });
});
