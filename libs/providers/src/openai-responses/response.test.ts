import { afterEach, describe, expect, it, vi } from "vitest";
import { readProviderError } from "../error-shape.js";
import type { StreamObservation } from "../shape.js";
import { SseParser } from "../sse.js";
import { ResponsesStreamMeter, summarizeResponse } from "./response.js";
import { readResponsesUsage } from "./usage.js";

/** One Responses stream event as OpenAI sends it: the type twice, as the name and in the data. */
function event(type: string, fields: Record<string, unknown>): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
}

// Field names as in openai-node's resources/responses/responses.d.ts (Response,
// ResponseFunctionToolCall, ResponseUsage, the Response*Event interfaces).
function response(fields: Record<string, unknown>): Record<string, unknown> {
  return {
    id: "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b",
    object: "response",
    created_at: 1756315696,
    status: "in_progress",
    background: false,
    error: null,
    incomplete_details: null,
    instructions: null,
    max_output_tokens: null,
    model: "gpt-4.1-2025-04-14",
    output: [],
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: true,
    temperature: 1,
    text: { format: { type: "text" }, verbosity: "medium" },
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    truncation: "disabled",
    usage: null,
    user: null,
    metadata: {},
    ...fields,
  };
}

const WEATHER = {
  id: "fc_68af4031a0e08193a4d5b1e7d8bd1f8f05438e46b5f69a3b",
  type: "function_call",
  status: "completed",
  arguments: '{"city":"Paris","unit":"celsius"}',
  call_id: "call_V8n4qWJzkC2F7tEGZ3xbYk1P",
  name: "get_weather",
};
const TIME = {
  id: "fc_68af4031c1f481938a9f0b3c2e5d7a6105438e46b5f69a3b",
  type: "function_call",
  status: "completed",
  arguments: '{"tz":"Europe/Paris"}',
  call_id: "call_Qm3Lr9XbT0sHcP2dAe6YwF4n",
  name: "get_time",
};

const USAGE = {
  input_tokens: 1234,
  input_tokens_details: { cached_tokens: 1024 },
  output_tokens: 56,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: 1290,
};

/** The events of one streamed function call at `output_index`, its arguments in `pieces`. */
function functionCallEvents(index: number, call: typeof WEATHER, pieces: string[], seq: number): string[] {
  const events = [
    event("response.output_item.added", {
      sequence_number: seq++,
      output_index: index,
      item: { ...call, status: "in_progress", arguments: "" },
    }),
  ];
  for (const delta of pieces) {
    events.push(
      event("response.function_call_arguments.delta", {
        sequence_number: seq++,
        item_id: call.id,
        output_index: index,
        delta,
        obfuscation: "x1",
      }),
    );
  }
  events.push(
    event("response.function_call_arguments.done", {
      sequence_number: seq++,
      item_id: call.id,
      output_index: index,
      arguments: call.arguments,
    }),
    event("response.output_item.done", { sequence_number: seq++, output_index: index, item: call }),
  );
  return events;
}

const CREATED = event("response.created", { sequence_number: 0, response: response({}) });
const IN_PROGRESS = event("response.in_progress", { sequence_number: 1, response: response({}) });
const WEATHER_EVENTS = functionCallEvents(0, WEATHER, ['{"city":', '"Paris",', '"unit":"cel', 'sius"}'], 2);
const TIME_EVENTS = functionCallEvents(1, TIME, ['{"tz":"Europe/', 'Paris"}'], 9);
const COMPLETED = event("response.completed", {
  sequence_number: 14,
  response: response({ status: "completed", output: [WEATHER, TIME], usage: USAGE }),
});

// Two parallel function calls, arguments spread over several deltas each.
const TOOL_STREAM = [CREATED, IN_PROGRESS, ...WEATHER_EVENTS, ...TIME_EVENTS, COMPLETED].join("");

const REASONING_STREAM = [
  event("response.created", {
    sequence_number: 0,
    response: response({ id: "resp_r1", model: "o4-mini-2025-04-16", reasoning: { effort: "medium" } }),
  }),
  event("response.output_item.added", {
    sequence_number: 1,
    output_index: 0,
    item: { id: "rs_1", type: "reasoning", summary: [] },
  }),
  event("response.output_item.done", {
    sequence_number: 2,
    output_index: 0,
    item: { id: "rs_1", type: "reasoning", summary: [] },
  }),
  event("response.output_item.added", {
    sequence_number: 3,
    output_index: 1,
    item: { id: "msg_1", type: "message", status: "in_progress", content: [], role: "assistant" },
  }),
  event("response.content_part.added", {
    sequence_number: 4,
    item_id: "msg_1",
    output_index: 1,
    content_index: 0,
    part: { type: "output_text", annotations: [], logprobs: [], text: "" },
  }),
  ...["The ", "answer ", "is 42", '; see "function_call" docs.'].map((delta, i) =>
    event("response.output_text.delta", {
      sequence_number: 5 + i,
      item_id: "msg_1",
      output_index: 1,
      content_index: 0,
      delta,
      logprobs: [],
      obfuscation: "a",
    }),
  ),
  event("response.output_text.done", {
    sequence_number: 9,
    item_id: "msg_1",
    output_index: 1,
    content_index: 0,
    text: 'The answer is 42; see "function_call" docs.',
    logprobs: [],
  }),
  event("response.output_item.done", {
    sequence_number: 10,
    output_index: 1,
    item: {
      id: "msg_1",
      type: "message",
      status: "completed",
      role: "assistant",
      content: [
        {
          type: "output_text",
          annotations: [],
          logprobs: [],
          text: 'The answer is 42; see "function_call" docs.',
        },
      ],
    },
  }),
  event("response.completed", {
    sequence_number: 11,
    response: response({
      id: "resp_r1",
      model: "o4-mini-2025-04-16",
      status: "completed",
      usage: {
        input_tokens: 5000,
        input_tokens_details: { cached_tokens: 4096 },
        output_tokens: 1200,
        output_tokens_details: { reasoning_tokens: 1024 },
        total_tokens: 6200,
      },
    }),
  }),
].join("");

/** Runs a stream through the parser and a meter the way the gateway does. */
function meterStream(text: string): { meter: ResponsesStreamMeter; seen: StreamObservation[] } {
  const parser = new SseParser();
  const meter = new ResponsesStreamMeter();
  const seen = [...parser.push(text), ...parser.flush()].map((e) => meter.observe(e));
  return { meter, seen };
}

const PLAIN = { hidden: false, terminal: false };
const TERMINAL = { hidden: false, terminal: true };

afterEach(() => {
  vi.restoreAllMocks();
});

describe("ResponsesStreamMeter", () => {
  it("given two function calls streamed in pieces, then it reads model, usage, status and both calls in order", () => {
    const { meter } = meterStream(TOOL_STREAM);
    expect(meter.summary()).toEqual({
      model: "gpt-4.1-2025-04-14",
      usage: {
        reported: true,
        inputTokens: 1234,
        outputTokens: 56,
        cachedInputTokens: 1024,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
      },
      finishReason: "completed",
      toolCalls: [
        {
          id: "call_V8n4qWJzkC2F7tEGZ3xbYk1P",
          name: "get_weather",
          arguments: '{"city":"Paris","unit":"celsius"}',
        },
        { id: "call_Qm3Lr9XbT0sHcP2dAe6YwF4n", name: "get_time", arguments: '{"tz":"Europe/Paris"}' },
      ],
      responseId: "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b",
    });
    expect(meter.complete).toBe(true);
    expect(meter.errorEvent).toBeUndefined();
  });

  it("given the same stream, then only response.completed is terminal and nothing is hidden", () => {
    const { seen } = meterStream(TOOL_STREAM);
    expect(seen).toEqual([...Array(seen.length - 1).fill(PLAIN), TERMINAL]);
  });

  it("given a stream cut off inside a call's arguments, then the calls so far, the id and the model are kept", () => {
    const cut = [CREATED, IN_PROGRESS, ...WEATHER_EVENTS, ...TIME_EVENTS.slice(0, 2)].join("");
    const { meter } = meterStream(cut);
    expect(meter.complete).toBe(false);
    expect(meter.summary()).toEqual({
      model: "gpt-4.1-2025-04-14",
      usage: {
        reported: false,
        inputTokens: 0,
        outputTokens: 0,
        cachedInputTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
      },
      finishReason: undefined,
      toolCalls: [
        {
          id: "call_V8n4qWJzkC2F7tEGZ3xbYk1P",
          name: "get_weather",
          arguments: '{"city":"Paris","unit":"celsius"}',
        },
        { id: "call_Qm3Lr9XbT0sHcP2dAe6YwF4n", name: "get_time", arguments: '{"tz":"Europe/' },
      ],
      responseId: "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b",
    });
  });

  it("given only added and delta events, then the arguments are the deltas joined", () => {
    const onlyDeltas = WEATHER_EVENTS.filter((e) => !e.includes(".done"));
    const { meter } = meterStream([CREATED, ...onlyDeltas].join(""));
    expect(meter.summary().toolCalls).toEqual([
      {
        id: "call_V8n4qWJzkC2F7tEGZ3xbYk1P",
        name: "get_weather",
        arguments: '{"city":"Paris","unit":"celsius"}',
      },
    ]);
  });

  it("given a reasoning model's text answer, then reasoning tokens are read and no call is found in the text", () => {
    const { meter, seen } = meterStream(REASONING_STREAM);
    expect(meter.summary()).toEqual({
      model: "o4-mini-2025-04-16",
      usage: {
        reported: true,
        inputTokens: 5000,
        outputTokens: 1200,
        cachedInputTokens: 4096,
        cacheWriteTokens: 0,
        reasoningTokens: 1024,
      },
      finishReason: "completed",
      toolCalls: [],
      responseId: "resp_r1",
    });
    expect(seen.at(-1)).toEqual(TERMINAL);
  });

  it("given text deltas, then none of them is parsed", () => {
    const parser = new SseParser();
    const events = parser.push(REASONING_STREAM);
    const deltas = events.filter((e) => e.event === "response.output_text.delta");
    const meter = new ResponsesStreamMeter();
    const parse = vi.spyOn(JSON, "parse");
    for (const e of deltas) meter.observe(e);
    expect(deltas).toHaveLength(4);
    expect(parse).not.toHaveBeenCalled();
  });

  it("given a provider that sends data lines without event names, then the stream is metered the same", () => {
    const dataOnly = TOOL_STREAM.replace(/^event: .*\n/gm, "");
    expect(dataOnly).not.toContain("event:");
    const { meter, seen } = meterStream(dataOnly);
    expect(meter.summary()).toEqual(meterStream(TOOL_STREAM).meter.summary());
    expect(seen.at(-1)).toEqual(TERMINAL);
  });

  it("given response.incomplete for the output limit, then it is whole and the reason follows the status", () => {
    const text = [
      CREATED,
      event("response.incomplete", {
        sequence_number: 5,
        response: response({
          status: "incomplete",
          incomplete_details: { reason: "max_output_tokens" },
          max_output_tokens: 16,
          usage: { ...USAGE, output_tokens: 16 },
        }),
      }),
    ].join("");
    const { meter, seen } = meterStream(text);
    expect(seen).toEqual([PLAIN, TERMINAL]);
    expect(meter.complete).toBe(true);
    expect(meter.errorEvent).toBeUndefined();
    expect(meter.summary()).toMatchObject({
      finishReason: "incomplete:max_output_tokens",
      usage: { reported: true, outputTokens: 16 },
    });
  });

  it("given response.failed, then it is whole, its error is reported, and the gateway reads code and message", () => {
    const failed = {
      code: "server_error",
      message:
        "The model produced invalid content. Consider modifying your prompt if you are seeing this error persistently.",
    };
    const text = [
      CREATED,
      event("response.failed", {
        sequence_number: 3,
        response: response({
          status: "failed",
          error: failed,
          usage: { ...USAGE, output_tokens: 0 },
        }),
      }),
    ].join("");
    const { meter, seen } = meterStream(text);
    expect(seen).toEqual([PLAIN, TERMINAL]);
    expect(meter.complete).toBe(true);
    expect(meter.summary()).toMatchObject({
      finishReason: "failed",
      usage: { reported: true, inputTokens: 1234 },
    });
    expect(JSON.parse(meter.errorEvent ?? "")).toEqual({ error: failed });
    expect(readProviderError(200, meter.errorEvent ?? "", [])).toEqual({
      type: "api_error",
      code: "server_error",
      message: failed.message,
    });
  });

  it("given response.failed without an error object, then a failure is still reported", () => {
    const { meter } = meterStream(
      event("response.failed", { sequence_number: 1, response: response({ status: "failed" }) }),
    );
    expect(readProviderError(200, meter.errorEvent ?? "", []).message).toBe(
      "The provider reported the response as failed.",
    );
  });

  it("given an error event as the live API sends it, nested under error, then it is kept as sent", () => {
    const data = JSON.stringify({
      type: "error",
      sequence_number: 2,
      error: {
        type: "insufficient_quota",
        code: "insufficient_quota",
        message: "You exceeded your current quota, please check your plan and billing details.",
        param: null,
      },
    });
    const { meter, seen } = meterStream(`${CREATED}event: error\ndata: ${data}\n\n`);
    expect(seen).toEqual([PLAIN, PLAIN]);
    expect(meter.errorEvent).toBe(data);
    expect(meter.complete).toBe(false);
    expect(meter.summary().responseId).toBe("resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b");
    expect(readProviderError(200, data, [])).toEqual({
      type: "insufficient_quota",
      code: "insufficient_quota",
      message: "You exceeded your current quota, please check your plan and billing details.",
    });
  });

  it("given an error event as the API reference documents it, flat, then it is kept as sent", () => {
    const data = JSON.stringify({
      type: "error",
      code: "ERR_SOMETHING",
      message: "Something went wrong",
      param: null,
      sequence_number: 1,
    });
    const { meter } = meterStream(`event: error\ndata: ${data}\n\n`);
    expect(meter.errorEvent).toBe(data);
  });

  it.each([["not json"], ["{truncated"], [""], ["[1,2]"], ["null"]])(
    "given response.completed with data %j, then it is terminal and nothing throws",
    (data) => {
      const meter = new ResponsesStreamMeter();
      expect(
        meter.observe({ raw: "", data, event: "response.completed", id: undefined, comment: false }),
      ).toEqual(TERMINAL);
      expect(meter.summary()).toMatchObject({ model: undefined, toolCalls: [], finishReason: undefined });
    },
  );

  it("given a comment keepalive, then it is plain", () => {
    const meter = new ResponsesStreamMeter();
    expect(
      meter.observe({ raw: ": ping\n\n", data: undefined, event: undefined, id: undefined, comment: true }),
    ).toEqual(PLAIN);
  });
});

describe("summarizeResponse", () => {
  it("given a response with two function calls, then it reads the same summary its stream would", () => {
    const json = response({
      status: "completed",
      output: [
        {
          id: "rs_2",
          type: "reasoning",
          summary: [],
        },
        WEATHER,
        {
          id: "msg_2",
          type: "message",
          status: "completed",
          role: "assistant",
          content: [{ type: "output_text", text: "Checking.", annotations: [] }],
        },
        TIME,
      ],
      usage: USAGE,
    });
    expect(summarizeResponse(json)).toEqual(meterStream(TOOL_STREAM).meter.summary());
  });

  it("given an incomplete response cut by the content filter, then the reason follows the status", () => {
    const json = response({ status: "incomplete", incomplete_details: { reason: "content_filter" } });
    expect(summarizeResponse(json).finishReason).toBe("incomplete:content_filter");
  });

  it("given an incomplete response without a reason, then the status alone is the finish reason", () => {
    expect(summarizeResponse(response({ status: "incomplete" })).finishReason).toBe("incomplete");
  });

  it("given a background response still queued, then its status is the finish reason and usage is unknown", () => {
    const summary = summarizeResponse(response({ status: "queued", background: true }));
    expect(summary).toMatchObject({ finishReason: "queued", usage: { reported: false } });
  });

  it("given something that is not a response, then nothing is known and nothing throws", () => {
    expect(summarizeResponse([1])).toEqual({
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

  it("given function calls without a name, then they are left out", () => {
    const json = response({
      output: [{ ...WEATHER, name: "" }, { type: "function_call", call_id: "c" }, TIME],
    });
    expect(summarizeResponse(json).toolCalls.map((call) => call.name)).toEqual(["get_time"]);
  });
});

describe("readResponsesUsage", () => {
  it.each([
    ["null", null],
    ["absent", undefined],
    ["an empty object", {}],
    ["string counts", { input_tokens: "10", output_tokens: "2" }],
  ])("given usage that is %s, then it is not reported", (_case, usage) => {
    expect(readResponsesUsage(usage).reported).toBe(false);
  });

  it("given counts without details, then cached and reasoning tokens are zero", () => {
    expect(readResponsesUsage({ input_tokens: 7, output_tokens: 3, total_tokens: 10 })).toEqual({
      reported: true,
      inputTokens: 7,
      outputTokens: 3,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
    });
  });
});

describe("output items that ask the agent to act", () => {
  it("are tool calls: functions, custom tools, and the built-in tools the client runs", () => {
    const summary = summarizeResponse({
      id: "resp_1",
      status: "completed",
      output: [
        { type: "function_call", call_id: "c1", name: "delete_repo", arguments: '{"name":"x"}' },
        { type: "custom_tool_call", call_id: "c2", name: "shell", input: "rm -rf /" },
        { type: "computer_call", call_id: "c3", action: { type: "click", x: 1, y: 2 } },
        { type: "local_shell_call", call_id: "c4", action: { type: "exec", command: ["ls"] } },
        { type: "web_search_call", id: "ws_1", status: "completed" },
        { type: "message", content: [] },
      ],
    });
    expect(summary.toolCalls).toEqual([
      { id: "c1", name: "delete_repo", arguments: '{"name":"x"}' },
      { id: "c2", name: "shell", arguments: "rm -rf /" },
      { id: "c3", name: "computer", arguments: '{"type":"click","x":1,"y":2}' },
      { id: "c4", name: "local_shell", arguments: '{"type":"exec","command":["ls"]}' },
    ]);
  });
});
