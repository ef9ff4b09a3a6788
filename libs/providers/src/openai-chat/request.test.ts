import { describe, expect, it } from "vitest";
import { readChatRequest, withStreamUsage, withStreamUsageBytes } from "./request.js";

describe("readChatRequest", () => {
  it("given a streamed request with system, developer and user messages, then it reads what the gateway needs", () => {
    const result = readChatRequest({
      model: "gpt-4o-mini",
      stream: true,
      stream_options: { include_usage: true },
      metadata: { run: "r-1" },
      messages: [
        { role: "system", content: "You are terse." },
        { role: "developer", content: [{ type: "text", text: "Use tools." }] },
        { role: "user", content: "What's the weather in Paris?" },
        { role: "assistant", content: null, tool_calls: [] },
      ],
    });
    expect(result).toEqual({
      ok: true,
      request: {
        model: "gpt-4o-mini",
        stream: true,
        clientWantsUsage: true,
        messageCount: 4,
        toolCount: 0,
        systemPrompt: "You are terse.\n\nUse tools.",
        firstMessage: "What's the weather in Paris?",
        metadata: { run: "r-1" },
      },
    });
  });

  it("given no stream, stream_options or metadata, then the defaults are off and empty", () => {
    const result = readChatRequest({ model: "m", messages: [] });
    expect(result).toEqual({
      ok: true,
      request: {
        model: "m",
        stream: false,
        clientWantsUsage: false,
        messageCount: 0,
        toolCount: 0,
        systemPrompt: "",
        firstMessage: "",
        metadata: undefined,
      },
    });
  });

  it("given include_usage that is truthy but not true, then the client did not ask for usage", () => {
    const result = readChatRequest({
      model: "m",
      stream: true,
      stream_options: { include_usage: "yes" },
      messages: [],
    });
    expect(result.ok && result.request.clientWantsUsage).toBe(false);
  });

  it("given content parts that are not text, then each stands in as its JSON, the same every time", () => {
    const image = { type: "image_url", image_url: { url: "https://example.com/cat.png" } };
    const body = {
      model: "m",
      messages: [{ role: "user", content: [{ type: "text", text: "Describe:" }, image] }],
    };
    const first = readChatRequest(body);
    const second = readChatRequest(structuredClone(body));
    expect(first.ok && first.request.firstMessage).toBe(`Describe:\n${JSON.stringify(image)}`);
    expect(second).toEqual(first);
  });

  it.each([
    ["a string body", "hello", null],
    ["null", null, null],
    ["an array body", [], null],
    ["a missing model", { messages: [] }, "model"],
    ["a numeric model", { model: 4, messages: [] }, "model"],
    ["an empty model", { model: "", messages: [] }, "model"],
    ["missing messages", { model: "m" }, "messages"],
    ["messages as an object", { model: "m", messages: {} }, "messages"],
    ["a string stream flag", { model: "m", stream: "true", messages: [] }, "stream"],
    ["stream_options as a string", { model: "m", stream_options: "x", messages: [] }, "stream_options"],
    ["metadata as an array", { model: "m", metadata: [], messages: [] }, "metadata"],
    [
      "a message that is a string",
      { model: "m", messages: [{ role: "user", content: "" }, "hi"] },
      "messages[1]",
    ],
    ["a message without a role", { model: "m", messages: [{ content: "hi" }] }, "messages[0].role"],
    ["content as a number", { model: "m", messages: [{ role: "user", content: 3 }] }, "messages[0].content"],
  ])("given %s, then it is refused naming the param", (_case, body, param) => {
    const result = readChatRequest(body);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.param).toBe(param);
    expect(result.error.message.length).toBeGreaterThan(0);
    if (param !== null) expect(result.error.message).toContain(`'${param}'`);
  });
});

describe("withStreamUsage", () => {
  it("given stream_options with other keys, then include_usage is added, the rest kept and the input untouched", () => {
    const body = { model: "m", stream: true, stream_options: { include_obfuscation: false } };
    const sent = withStreamUsage(body);
    expect(sent).toEqual({
      model: "m",
      stream: true,
      stream_options: { include_obfuscation: false, include_usage: true },
    });
    expect(body.stream_options).toEqual({ include_obfuscation: false });
  });

  it("given no stream_options, then they are created", () => {
    expect(withStreamUsage({ model: "m" })).toEqual({ model: "m", stream_options: { include_usage: true } });
  });

  it("given include_usage false, then it is turned on", () => {
    const sent = withStreamUsage({ stream_options: { include_usage: false } });
    expect(sent.stream_options).toEqual({ include_usage: true });
  });
});

describe("withStreamUsageBytes", () => {
  const sent = (text: string) => {
    const raw = Buffer.from(text);
    return withStreamUsageBytes(JSON.parse(text) as Record<string, unknown>, raw).toString();
  };

  it("given no stream_options, then they go in front of the first member and the client's bytes follow as sent", () => {
    const text = ' \n{ "model":"m",  "stream":true, "messages":[{"role":"user","content":"h\u00e9"}]}';
    const out = sent(text);
    expect(out).toBe(
      ' \n{"stream_options":{"include_usage":true}, "model":"m",  "stream":true, "messages":[{"role":"user","content":"h\u00e9"}]}',
    );
    expect(JSON.parse(out)).toEqual(withStreamUsage(JSON.parse(text) as Record<string, unknown>));
  });

  it.each([
    ['{"model":"m","stream":true,"stream_options":{"include_obfuscation":false}}'],
    ['{"model":"m","stream":true,"stream_options":null}'],
    ['{"model":"m","stream":true,"stream_options":{"include_usage":false}}'],
    ["{}"],
    ["{ \t}"],
  ])("given %s, then the result is the body with usage merged in, as JSON", (text) => {
    expect(JSON.parse(sent(text))).toEqual(withStreamUsage(JSON.parse(text) as Record<string, unknown>));
  });
});
