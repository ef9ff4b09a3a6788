import { afterEach, describe, expect, it, vi } from "vitest";
import { readProviderError } from "../error-shape.js";
import type { StreamObservation } from "../shape.js";
import { SseParser } from "../sse.js";
import { AnthropicStreamMeter, summarizeAnthropicMessage } from "./response.js";
import { readAnthropicUsage } from "./usage.js";

/** One Anthropic stream event: the type twice, as the name and in the data. */
function event(type: string, fields: Record<string, unknown> = {}): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
}

function delta(index: number, body: Record<string, unknown>): string {
  return event("content_block_delta", { index, delta: body });
}

// Field names as in @anthropic-ai/sdk's resources/messages/messages.d.ts (Message, Usage,
// MessageDeltaUsage, the Raw*Event interfaces); the stream is shaped like Anthropic's own
// tool-use example: text, then two tool_use blocks whose input arrives in pieces.
const MESSAGE_ID = "msg_014p7gG3wDgGV9EUtLvnow3U";
const MODEL = "claude-sonnet-4-5-20250929";
const START_USAGE = {
  input_tokens: 472,
  cache_creation_input_tokens: 1_200,
  cache_read_input_tokens: 9_800,
  cache_creation: { ephemeral_5m_input_tokens: 1_200, ephemeral_1h_input_tokens: 0 },
  output_tokens: 2,
  service_tier: "standard",
};
const MESSAGE_START = event("message_start", {
  message: {
    id: MESSAGE_ID,
    type: "message",
    role: "assistant",
    model: MODEL,
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: START_USAGE,
  },
});
const TEXT_BLOCK = [
  event("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
  'event: ping\ndata: {"type": "ping"}\n\n',
  delta(0, { type: "text_delta", text: "Okay, let me check " }),
  delta(0, { type: "text_delta", text: 'the weather ("tool_use" is on).' }),
  event("content_block_stop", { index: 0 }),
];
const WEATHER_BLOCK = [
  event("content_block_start", {
    index: 1,
    content_block: {
      type: "tool_use",
      id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
      name: "get_weather",
      input: {},
      caller: { type: "direct" },
    },
  }),
  delta(1, { type: "input_json_delta", partial_json: "" }),
  delta(1, { type: "input_json_delta", partial_json: '{"location": "San Fra' }),
  delta(1, { type: "input_json_delta", partial_json: 'ncisco, CA", "unit": "fah' }),
  delta(1, { type: "input_json_delta", partial_json: 'renheit"}' }),
  event("content_block_stop", { index: 1 }),
];
const TIME_BLOCK = [
  event("content_block_start", {
    index: 2,
    content_block: { type: "tool_use", id: "toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8", name: "get_time", input: {} },
  }),
  delta(2, { type: "input_json_delta", partial_json: "" }),
  event("content_block_stop", { index: 2 }),
];
const MESSAGE_END = [
  event("message_delta", {
    delta: { stop_reason: "tool_use", stop_sequence: null },
    usage: { output_tokens: 89 },
  }),
  event("message_stop"),
];
const TOOL_STREAM = [MESSAGE_START, ...TEXT_BLOCK, ...WEATHER_BLOCK, ...TIME_BLOCK, ...MESSAGE_END].join("");

const TOOL_USAGE = {
  reported: true,
  inputTokens: 472 + 1_200 + 9_800,
  outputTokens: 89,
  cachedInputTokens: 9_800,
  cacheWriteTokens: 1_200,
  reasoningTokens: 0,
};
const TOOL_CALLS = [
  {
    id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
    name: "get_weather",
    arguments: '{"location":"San Francisco, CA","unit":"fahrenheit"}',
  },
  { id: "toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8", name: "get_time", arguments: "{}" },
];

/** Runs a stream through the parser and a meter the way the gateway does. */
function meterStream(text: string): { meter: AnthropicStreamMeter; seen: StreamObservation[] } {
  const parser = new SseParser();
  const meter = new AnthropicStreamMeter();
  const seen = [...parser.push(text), ...parser.flush()].map((e) => meter.observe(e));
  return { meter, seen };
}

const PLAIN = { hidden: false, terminal: false };
const TERMINAL = { hidden: false, terminal: true };

afterEach(() => {
  vi.restoreAllMocks();
});

describe("AnthropicStreamMeter", () => {
  it("given text then two tool calls, then it reads model, usage with cache tokens, stop reason and both calls", () => {
    const { meter } = meterStream(TOOL_STREAM);
    expect(meter.summary()).toEqual({
      model: MODEL,
      usage: TOOL_USAGE,
      finishReason: "tool_use",
      toolCalls: TOOL_CALLS,
      responseId: MESSAGE_ID,
    });
    expect(meter.complete).toBe(true);
    expect(meter.errorEvent).toBeUndefined();
  });

  it("given the same stream, then only message_stop is terminal and nothing is hidden", () => {
    const { seen } = meterStream(TOOL_STREAM);
    expect(seen).toEqual([...Array(seen.length - 1).fill(PLAIN), TERMINAL]);
  });

  it("given text deltas outside a tool call, then none of them is parsed", () => {
    const events = new SseParser().push(TOOL_STREAM);
    const meter = new AnthropicStreamMeter();
    const textDeltas = events.filter((e) => e.data?.includes("text_delta"));
    meter.observe(events[0]!);
    const parse = vi.spyOn(JSON, "parse");
    for (const e of textDeltas) meter.observe(e);
    expect(textDeltas).toHaveLength(2);
    expect(parse).not.toHaveBeenCalled();
  });

  it("given a newer API's message_delta with input and cache counts, then they replace message_start's", () => {
    const end = event("message_delta", {
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: {
        input_tokens: 500,
        cache_creation_input_tokens: null,
        cache_read_input_tokens: 10_000,
        output_tokens: 120,
        output_tokens_details: { thinking_tokens: 64 },
        server_tool_use: null,
      },
    });
    const { meter } = meterStream([MESSAGE_START, ...TEXT_BLOCK, end, event("message_stop")].join(""));
    expect(meter.summary()).toMatchObject({
      finishReason: "end_turn",
      usage: {
        reported: true,
        inputTokens: 500 + 1_200 + 10_000,
        outputTokens: 120,
        cachedInputTokens: 10_000,
        cacheWriteTokens: 1_200,
        reasoningTokens: 64,
      },
    });
  });

  it("given an overloaded error midway, then it is kept as sent, the stream is not complete, and the gateway reads it", () => {
    const data = JSON.stringify({
      type: "error",
      error: { details: null, type: "overloaded_error", message: "Overloaded" },
      request_id: "req_011CSHoEeqs5C35K2UUqR7Fy",
    });
    const { meter, seen } = meterStream(`${MESSAGE_START}${TEXT_BLOCK[0]}event: error\ndata: ${data}\n\n`);
    expect(seen).toEqual([PLAIN, PLAIN, PLAIN]);
    expect(meter.errorEvent).toBe(data);
    expect(meter.complete).toBe(false);
    expect(meter.summary()).toMatchObject({ model: MODEL, responseId: MESSAGE_ID, finishReason: undefined });
    expect(readProviderError(200, data, [])).toEqual({
      type: "overloaded_error",
      code: null,
      message: "Overloaded",
    });
  });

  it("given a stream cut off inside a tool call's input, then the input so far is kept as it arrived", () => {
    const cut = [MESSAGE_START, ...WEATHER_BLOCK.slice(0, 3)].join("");
    const { meter } = meterStream(cut);
    expect(meter.complete).toBe(false);
    expect(meter.summary()).toEqual({
      model: MODEL,
      usage: { ...TOOL_USAGE, outputTokens: 2 },
      finishReason: undefined,
      toolCalls: [
        { id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", name: "get_weather", arguments: '{"location": "San Fra' },
      ],
      responseId: MESSAGE_ID,
    });
  });

  it.each([
    ["null", null],
    ["absent", undefined],
  ])(
    "given a whole stream whose message_delta's output_tokens is %s, then its usage is not reported",
    (_case, output) => {
      const end = event("message_delta", {
        delta: { stop_reason: "end_turn", stop_sequence: null },
        usage: output === undefined ? {} : { output_tokens: output },
      });
      const { meter } = meterStream([MESSAGE_START, ...TEXT_BLOCK, end, event("message_stop")].join(""));
      expect(meter.complete).toBe(true);
      // message_start's output_tokens (2) stands for an answer not yet written.
      expect(meter.summary().usage).toMatchObject({ reported: false, outputTokens: 0 });
      expect(meter.summary().usage.problem).toBe("output_tokens is missing");
    },
  );

  it("given a message_delta with an impossible output count, then its usage is not reported, and says why", () => {
    const end = event("message_delta", {
      delta: { stop_reason: "end_turn" },
      usage: { output_tokens: 2 ** 64 },
    });
    const { meter } = meterStream([MESSAGE_START, ...TEXT_BLOCK, end, event("message_stop")].join(""));
    expect(meter.summary().usage).toMatchObject({ reported: false, inputTokens: 0, outputTokens: 0 });
    expect(meter.summary().usage.problem).toContain(
      "output_tokens 18446744073709552000 is more than 100000000",
    );
  });

  it("given a server tool and its result, then only the client's tool calls count", () => {
    const server = [
      event("content_block_start", {
        index: 0,
        content_block: {
          type: "server_tool_use",
          id: "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
          name: "web_search",
          input: {},
        },
      }),
      delta(0, { type: "input_json_delta", partial_json: '{"query": "weather SF"}' }),
      event("content_block_stop", { index: 0 }),
    ];
    const { meter } = meterStream([MESSAGE_START, ...server, ...MESSAGE_END].join(""));
    expect(meter.summary().toolCalls).toEqual([]);
  });

  it("given a provider that sends data lines without event names, then the stream is metered the same", () => {
    const dataOnly = TOOL_STREAM.replace(/^event: .*\n/gm, "");
    expect(dataOnly).not.toContain("event:");
    const { meter, seen } = meterStream(dataOnly);
    expect(meter.summary()).toEqual(meterStream(TOOL_STREAM).meter.summary());
    expect(seen.at(-1)).toEqual(TERMINAL);
  });

  it.each([["not json"], ["{truncated"], [""], ["[1,2]"], ["null"]])(
    "given message_start with data %j, then nothing is known and nothing throws",
    (data) => {
      const meter = new AnthropicStreamMeter();
      expect(meter.observe({ raw: "", data, event: "message_start", id: undefined, comment: false })).toEqual(
        PLAIN,
      );
      expect(meter.summary()).toMatchObject({ model: undefined, usage: { reported: false }, toolCalls: [] });
    },
  );
});

describe("summarizeAnthropicMessage", () => {
  it("given the message the tool stream adds up to, then it reads the same summary the stream did", () => {
    const message = {
      id: MESSAGE_ID,
      type: "message",
      role: "assistant",
      model: MODEL,
      content: [
        { type: "text", text: 'Okay, let me check the weather ("tool_use" is on).', citations: null },
        {
          type: "tool_use",
          id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
          name: "get_weather",
          input: { location: "San Francisco, CA", unit: "fahrenheit" },
          caller: { type: "direct" },
        },
        { type: "tool_use", id: "toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8", name: "get_time", input: {} },
      ],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { ...START_USAGE, output_tokens: 89 },
    };
    expect(summarizeAnthropicMessage(message)).toEqual(meterStream(TOOL_STREAM).meter.summary());
  });

  it("given a server tool's use and result, then they are not tool calls", () => {
    const summary = summarizeAnthropicMessage({
      id: "msg_01",
      model: MODEL,
      content: [
        { type: "server_tool_use", id: "srvtoolu_01", name: "web_search", input: { query: "weather SF" } },
        { type: "web_search_tool_result", tool_use_id: "srvtoolu_01", content: [] },
        { type: "text", text: "Sunny." },
      ],
      stop_reason: "end_turn",
      usage: { input_tokens: 10, output_tokens: 5 },
    });
    expect(summary).toMatchObject({ toolCalls: [], finishReason: "end_turn" });
  });

  it("given something that is not a message, then nothing is known and nothing throws", () => {
    expect(summarizeAnthropicMessage(null)).toEqual({
      model: undefined,
      usage: {
        reported: false,
        inputTokens: 0,
        outputTokens: 0,
        cachedInputTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
      },
      finishReason: undefined,
      toolCalls: [],
      responseId: undefined,
    });
  });
});

describe("readAnthropicUsage", () => {
  it("given input tokens and both cache counts, then the input is their sum and the cache counts are its parts", () => {
    expect(
      readAnthropicUsage({
        input_tokens: 3,
        cache_creation_input_tokens: 2_048,
        cache_read_input_tokens: 30_000,
        output_tokens: 400,
        output_tokens_details: { thinking_tokens: 250 },
      }),
    ).toEqual({
      reported: true,
      inputTokens: 32_051,
      outputTokens: 400,
      cachedInputTokens: 30_000,
      cacheWriteTokens: 2_048,
      reasoningTokens: 250,
    });
  });

  it("given cache counts that are null (older messages), then they are zero", () => {
    expect(
      readAnthropicUsage({
        input_tokens: 25,
        cache_creation_input_tokens: null,
        cache_read_input_tokens: null,
        output_tokens: 1,
      }),
    ).toEqual({
      reported: true,
      inputTokens: 25,
      outputTokens: 1,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
    });
  });

  it.each([
    ["null", null],
    ["an empty object", {}],
    ["string counts", { input_tokens: "10", output_tokens: "2" }],
    ["a negative cache read", { input_tokens: 10, output_tokens: 2, cache_read_input_tokens: -1 }],
    [
      "parts in range that add up past the bound",
      {
        input_tokens: 60_000_000,
        output_tokens: 2,
        cache_read_input_tokens: 60_000_000,
        cache_creation_input_tokens: 0,
      },
    ],
  ])("given usage that is %s, then it is not reported", (_case, usage) => {
    expect(readAnthropicUsage(usage).reported).toBe(false);
  });
});
