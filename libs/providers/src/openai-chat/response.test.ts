import { describe, expect, it } from "vitest";
import { SseParser } from "../sse.js";
import { ChatStreamMeter, summarizeChatCompletion } from "./response.js";
import { readChatUsage } from "./usage.js";

function chunk(choices: unknown[], usage: unknown = null): string {
  return `data: ${JSON.stringify({
    id: "chatcmpl-B9xQ",
    object: "chat.completion.chunk",
    created: 1741000000,
    model: "gpt-4o-mini-2024-07-18",
    service_tier: "default",
    system_fingerprint: "fp_06737a9306",
    choices,
    usage,
  })}\n\n`;
}

function toolDelta(toolCalls: unknown[]): unknown {
  return { index: 0, delta: { tool_calls: toolCalls }, logprobs: null, finish_reason: null };
}

// Shaped like OpenAI's stream for two parallel tool calls with include_usage: the first
// call's name arrives once, its arguments in fragments; then the second call; then the
// finish chunk; then the usage-only chunk; then [DONE].
const TOOL_STREAM = [
  chunk([
    {
      index: 0,
      delta: {
        role: "assistant",
        content: null,
        tool_calls: [
          { index: 0, id: "call_W1", type: "function", function: { name: "get_weather", arguments: "" } },
        ],
        refusal: null,
      },
      logprobs: null,
      finish_reason: null,
    },
  ]),
  chunk([toolDelta([{ index: 0, function: { arguments: '{"city":' } }])]),
  chunk([toolDelta([{ index: 0, function: { arguments: '"Paris"}' } }])]),
  chunk([
    toolDelta([{ index: 1, id: "call_T2", type: "function", function: { name: "get_time", arguments: "" } }]),
  ]),
  chunk([toolDelta([{ index: 1, function: { arguments: '{"tz":"CET"}' } }])]),
  chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: "tool_calls" }]),
  chunk([], {
    prompt_tokens: 1234,
    completion_tokens: 56,
    total_tokens: 1290,
    prompt_tokens_details: { cached_tokens: 1024, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0 },
  }),
  "data: [DONE]\n\n",
].join("");

/** Runs a stream through the parser and the meter the way the gateway does. */
function meterStream(text: string): { meter: ChatStreamMeter; usageOnly: boolean[]; forwarded: string } {
  const parser = new SseParser();
  const meter = new ChatStreamMeter();
  const usageOnly: boolean[] = [];
  let forwarded = "";
  for (const event of [...parser.push(text), ...parser.flush()]) {
    const seen = event.data === undefined ? { usageOnly: false } : meter.observe(event.data);
    usageOnly.push(seen.usageOnly);
    if (!seen.usageOnly) forwarded += event.raw;
  }
  return { meter, usageOnly, forwarded };
}

describe("ChatStreamMeter", () => {
  it("given an OpenAI tool-call stream with usage, then it reads model, usage, finish reason and calls in order", () => {
    const { meter } = meterStream(TOOL_STREAM);
    expect(meter.summary()).toEqual({
      model: "gpt-4o-mini-2024-07-18",
      usage: {
        reported: true,
        inputTokens: 1234,
        outputTokens: 56,
        cachedInputTokens: 1024,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
      },
      finishReason: "tool_calls",
      toolCalls: [
        { id: "call_W1", name: "get_weather", arguments: '{"city":"Paris"}' },
        { id: "call_T2", name: "get_time", arguments: '{"tz":"CET"}' },
      ],
      responseId: "chatcmpl-B9xQ",
    });
  });

  it("given the same stream, then only the usage chunk is marked usage-only and hiding it leaves the rest intact", () => {
    const { usageOnly, forwarded } = meterStream(TOOL_STREAM);
    expect(usageOnly).toEqual([false, false, false, false, false, false, true, false]);
    const usageChunkStart = TOOL_STREAM.lastIndexOf("data: {");
    const usageChunkEnd = TOOL_STREAM.indexOf("data: [DONE]");
    expect(forwarded).toBe(TOOL_STREAM.slice(0, usageChunkStart) + TOOL_STREAM.slice(usageChunkEnd));
  });

  it("given a stream without usage, then usage is not reported rather than zero", () => {
    const { meter } = meterStream(
      chunk([{ index: 0, delta: { content: "Hi" }, finish_reason: null }]) +
        chunk([{ index: 0, delta: {}, finish_reason: "stop" }]) +
        "data: [DONE]\n\n",
    );
    expect(meter.summary()).toEqual({
      model: "gpt-4o-mini-2024-07-18",
      usage: {
        reported: false,
        inputTokens: 0,
        outputTokens: 0,
        cachedInputTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
      },
      finishReason: "stop",
      toolCalls: [],
      responseId: "chatcmpl-B9xQ",
    });
  });

  it("given a leading chunk with no choices and no usage (Azure's filter results), then it is not usage-only", () => {
    const meter = new ChatStreamMeter();
    const seen = meter.observe(JSON.stringify({ model: "", choices: [], prompt_filter_results: [] }));
    meter.observe(JSON.stringify({ model: "gpt-4o", choices: [{ index: 0, delta: { content: "x" } }] }));
    expect(seen.usageOnly).toBe(false);
    expect(meter.summary().model).toBe("gpt-4o");
  });

  it.each([["[DONE]"], ["not json"], ["{truncated"], [""], ["[1,2]"], ["null"], ['"text"']])(
    "given data %j, then it is ignored without throwing",
    (data) => {
      const meter = new ChatStreamMeter();
      expect(meter.observe(data)).toEqual({ usageOnly: false });
      expect(meter.summary()).toEqual({
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
    },
  );

  it("given whole tool calls repeated without an index but with ids, then each call counts once", () => {
    const meter = new ChatStreamMeter();
    const call = (id: string, name: string) =>
      JSON.stringify({ choices: [{ delta: { tool_calls: [{ id, function: { name, arguments: "{}" } }] } }] });
    meter.observe(call("a", "search"));
    meter.observe(call("a", "search"));
    meter.observe(call("b", "search"));
    expect(meter.summary().toolCalls).toEqual([
      { id: "a", name: "search", arguments: "{}" },
      { id: "b", name: "search", arguments: "{}" },
    ]);
  });

  it("given tool calls on a second choice, then they count (the gate must see them) but its finish reason does not", () => {
    const meter = new ChatStreamMeter();
    meter.observe(
      JSON.stringify({
        choices: [
          {
            index: 1,
            delta: { tool_calls: [{ index: 0, function: { name: "other" } }] },
            finish_reason: "length",
          },
        ],
      }),
    );
    expect(meter.summary()).toMatchObject({
      toolCalls: [{ id: "", name: "other", arguments: "" }],
      finishReason: undefined,
    });
  });

  it("given Groq's usage under x_groq in the last chunk, then usage is read from there", () => {
    const meter = new ChatStreamMeter();
    meter.observe(
      JSON.stringify({
        model: "llama-3.3-70b-versatile",
        choices: [{ index: 0, delta: {}, finish_reason: "stop" }],
        x_groq: { id: "req_1", usage: { prompt_tokens: 10, completion_tokens: 5 } },
      }),
    );
    expect(meter.summary().usage).toEqual({
      reported: true,
      inputTokens: 10,
      outputTokens: 5,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
    });
  });
});

describe("ChatStreamMeter and a provider error inside the stream", () => {
  it("given an error event after some chunks, then it is kept as sent and is not mistaken for a chunk", () => {
    const error = JSON.stringify({ error: { message: "overloaded", type: "server_error", code: null } });
    const { meter } = meterStream(
      `${chunk([{ index: 0, delta: { content: "Hel" }, finish_reason: null }])}data: ${error}\n\n`,
    );
    expect(meter.errorEvent).toBe(error);
    expect(meter.summary()).toMatchObject({ model: "gpt-4o-mini-2024-07-18", finishReason: undefined });
  });

  it("given a stream without one, then there is none", () => {
    expect(meterStream(TOOL_STREAM).meter.errorEvent).toBeUndefined();
  });
});

describe("summarizeChatCompletion", () => {
  it("given a completion with tool calls and cached prompt tokens, then it reads the same summary a stream would", () => {
    const summary = summarizeChatCompletion({
      id: "chatcmpl-B9xR",
      object: "chat.completion",
      created: 1741000000,
      model: "gpt-4o-2024-08-06",
      choices: [
        {
          index: 0,
          message: {
            role: "assistant",
            content: null,
            tool_calls: [
              {
                id: "call_1",
                type: "function",
                function: { name: "get_weather", arguments: '{"city":"Paris"}' },
              },
              { id: "call_2", type: "function", function: { name: "get_time", arguments: "{}" } },
            ],
            refusal: null,
          },
          logprobs: null,
          finish_reason: "tool_calls",
        },
      ],
      usage: {
        prompt_tokens: 2006,
        completion_tokens: 300,
        total_tokens: 2306,
        prompt_tokens_details: { cached_tokens: 1920 },
      },
    });
    expect(summary).toEqual({
      model: "gpt-4o-2024-08-06",
      usage: {
        reported: true,
        inputTokens: 2006,
        outputTokens: 300,
        cachedInputTokens: 1920,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
      },
      finishReason: "tool_calls",
      toolCalls: [
        { id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
        { id: "call_2", name: "get_time", arguments: "{}" },
      ],
      responseId: "chatcmpl-B9xR",
    });
  });

  it("given something that is not a completion, then nothing is known and nothing throws", () => {
    expect(summarizeChatCompletion("oops")).toEqual({
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

describe("readChatUsage", () => {
  it.each([
    ["null", null],
    ["absent", undefined],
    ["an empty object", {}],
    ["null counts", { prompt_tokens: null, completion_tokens: null }],
  ])("given usage that is %s, then it is not reported", (_case, usage) => {
    expect(readChatUsage(usage)).toEqual({
      reported: false,
      inputTokens: 0,
      outputTokens: 0,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
    });
  });

  it("given counts without details, then cached tokens are zero", () => {
    expect(readChatUsage({ prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 })).toEqual({
      reported: true,
      inputTokens: 7,
      outputTokens: 3,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
    });
  });

  it.each([
    [{ prompt_tokens: "10", completion_tokens: "2" }, "prompt_tokens is a string, not a number"],
    [{ prompt_tokens: -5, completion_tokens: 3 }, "prompt_tokens -5 is negative"],
    [{ prompt_tokens: 5, completion_tokens: 2 ** 64 }, "completion_tokens 18446744073709552000 is more than"],
    [{ prompt_tokens: 5 }, "completion_tokens is missing"],
    [
      { prompt_tokens: 5, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 6 } },
      "cached and cache-written tokens (6 + 0) are more than the input (5)",
    ],
  ])("given %j, then it is not reported, and says why", (usage, problem) => {
    const read = readChatUsage(usage);
    expect(read).toMatchObject({ reported: false, inputTokens: 0, outputTokens: 0, cachedInputTokens: 0 });
    expect(read.problem).toContain(problem);
  });

  it("given a fraction, then it is rounded and said to be", () => {
    expect(readChatUsage({ prompt_tokens: 10, completion_tokens: 3.7 })).toEqual({
      reported: true,
      inputTokens: 10,
      outputTokens: 4,
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
      problem: "completion_tokens 3.7 is not a whole number: rounded to 4",
    });
  });
});

describe("tool calls in every choice, and custom tools", () => {
  const fn = (id: string, name: string, args: string) => ({
    id,
    type: "function",
    function: { name, arguments: args },
  });
  it("reads every choice's tool calls, custom ones too, from a whole completion", () => {
    const summary = summarizeChatCompletion({
      id: "chatcmpl-1",
      choices: [
        { index: 0, finish_reason: "stop", message: { role: "assistant", content: "hi" } },
        {
          index: 1,
          finish_reason: "tool_calls",
          message: {
            role: "assistant",
            tool_calls: [
              fn("call_a", "delete_repo", '{"name":"x"}'),
              { id: "call_b", type: "custom", custom: { name: "shell", input: "rm -rf /" } },
            ],
          },
        },
      ],
    });
    expect(summary.finishReason).toBe("stop");
    expect(summary.toolCalls).toEqual([
      { id: "call_a", name: "delete_repo", arguments: '{"name":"x"}' },
      { id: "call_b", name: "shell", arguments: "rm -rf /" },
    ]);
  });

  it("folds streamed tool calls of every choice apart, by choice and index", () => {
    const meter = new ChatStreamMeter();
    const chunk = (index: number, calls: unknown[]) =>
      JSON.stringify({ id: "c", choices: [{ index, delta: { tool_calls: calls } }] });
    meter.observe(chunk(0, [{ index: 0, id: "call_1", function: { name: "read", arguments: '{"p":' } }]));
    meter.observe(chunk(1, [{ index: 0, id: "call_2", function: { name: "delete_repo", arguments: "{" } }]));
    meter.observe(chunk(0, [{ index: 0, function: { arguments: '"a"}' } }]));
    meter.observe(chunk(1, [{ index: 0, function: { arguments: "}" } }]));
    meter.observe(
      chunk(1, [{ index: 1, id: "call_3", type: "custom", custom: { name: "shell", input: "ls" } }]),
    );
    expect(meter.summary().toolCalls).toEqual([
      { id: "call_1", name: "read", arguments: '{"p":"a"}' },
      { id: "call_2", name: "delete_repo", arguments: "{}" },
      { id: "call_3", name: "shell", arguments: "ls" },
    ]);
  });
});

describe("the legacy functions API", () => {
  it("counts a function_call, whole or streamed", () => {
    const whole = summarizeChatCompletion({
      choices: [
        {
          index: 0,
          finish_reason: "function_call",
          message: { function_call: { name: "delete_repo", arguments: "{}" } },
        },
      ],
    });
    expect(whole.toolCalls).toEqual([{ id: "", name: "delete_repo", arguments: "{}" }]);
    const meter = new ChatStreamMeter();
    meter.observe(
      JSON.stringify({
        choices: [{ index: 0, delta: { function_call: { name: "delete_repo", arguments: '{"a"' } } }],
      }),
    );
    meter.observe(
      JSON.stringify({ choices: [{ index: 0, delta: { function_call: { arguments: ":1}" } } }] }),
    );
    expect(meter.summary().toolCalls).toEqual([{ id: "", name: "delete_repo", arguments: '{"a":1}' }]);
  });
});

describe("ChatStreamMeter reading only the chunks that can change what it meters", () => {
  const base = { id: "chatcmpl-1", object: "chat.completion.chunk", model: "gpt-4o-mini" };
  const text = (content: string, extra: Record<string, unknown> = {}) =>
    JSON.stringify({
      ...base,
      choices: [{ index: 0, delta: { content }, finish_reason: null }],
      usage: null,
      ...extra,
    });

  it.each([
    ["compact JSON", (value: unknown) => JSON.stringify(value)],
    [
      "Python's spacing",
      (value: unknown) => JSON.stringify(value).replaceAll('":', '": ').replaceAll(",", ", "),
    ],
    ["pretty-printed", (value: unknown) => JSON.stringify(value, null, 2)],
  ])(
    "given a stream written as %s, then text chunks between change nothing and the rest is read",
    (_, write) => {
      const meter = new ChatStreamMeter();
      const chunks = [
        {
          ...base,
          choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }],
          usage: null,
        },
        {
          ...base,
          choices: [
            { index: 0, delta: { content: 'a "usage": {"x":1} and "error" in text' }, finish_reason: null },
          ],
          usage: null,
        },
        {
          ...base,
          choices: [
            {
              index: 0,
              delta: {
                tool_calls: [
                  { index: 0, id: "call_1", type: "function", function: { name: "rm", arguments: "{}" } },
                ],
              },
              finish_reason: null,
            },
          ],
          usage: null,
        },
        { ...base, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }], usage: null },
        { ...base, choices: [], usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 } },
      ];
      const seen = chunks.map((chunk) => meter.observe(write(chunk)).usageOnly);
      expect(seen).toEqual([false, false, false, false, true]);
      const summary = meter.summary();
      expect(summary.model).toBe("gpt-4o-mini");
      expect(summary.responseId).toBe("chatcmpl-1");
      expect(summary.finishReason).toBe("tool_calls");
      expect(summary.toolCalls.map((call) => call.name)).toEqual(["rm"]);
      expect(summary.usage).toMatchObject({ reported: true, inputTokens: 12, outputTokens: 7 });
    },
  );

  it("given an error after text chunks, then the error is still seen", () => {
    const meter = new ChatStreamMeter();
    meter.observe(text("hello"));
    meter.observe(text(" world"));
    const error = JSON.stringify({ error: { message: "overloaded", type: "server_error" } });
    meter.observe(error);
    expect(meter.errorEvent).toBe(error);
  });
});
