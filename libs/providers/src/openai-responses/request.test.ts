import { describe, expect, it } from "vitest";
import { readResponsesRequest } from "./request.js";

describe("readResponsesRequest", () => {
  it("given a streamed request with instructions, a developer item and a conversation, then it reads what the gateway needs", () => {
    const result = readResponsesRequest({
      model: "gpt-4.1",
      stream: true,
      instructions: "You are terse.",
      previous_response_id: null,
      metadata: { run: "r-1" },
      input: [
        { role: "developer", content: [{ type: "input_text", text: "Use tools." }] },
        { type: "message", role: "user", content: "What's the weather in Paris?" },
        {
          type: "function_call",
          call_id: "call_V8n4",
          name: "get_weather",
          arguments: '{"city":"Paris"}',
        },
        { type: "function_call_output", call_id: "call_V8n4", output: '{"temp_c":18}' },
      ],
    });
    expect(result).toEqual({
      ok: true,
      request: {
        model: "gpt-4.1",
        stream: true,
        messageCount: 4,
        toolCount: 0,
        systemPrompt: "You are terse.\n\nUse tools.",
        firstMessage: "What's the weather in Paris?",
        previousResponseId: undefined,
        metadata: { run: "r-1" },
      },
    });
  });

  it("given a string input continuing a previous response, then it is one item and the id is read", () => {
    const result = readResponsesRequest({
      model: "o4-mini",
      input: "And in Lyon?",
      previous_response_id: "resp_68af4030592c81938ec0a5fbab4a3e9f",
    });
    expect(result).toEqual({
      ok: true,
      request: {
        model: "o4-mini",
        stream: false,
        messageCount: 1,
        toolCount: 0,
        systemPrompt: "",
        firstMessage: "And in Lyon?",
        previousResponseId: "resp_68af4030592c81938ec0a5fbab4a3e9f",
        metadata: undefined,
      },
    });
  });

  it("given no input (a stored prompt), then there are no items and nothing is refused", () => {
    const result = readResponsesRequest({ model: "gpt-4.1", prompt: { id: "pmpt_123", version: "2" } });
    expect(result).toMatchObject({
      ok: true,
      request: { messageCount: 0, firstMessage: "", systemPrompt: "" },
    });
  });

  it("given an empty previous_response_id, then the request continues nothing", () => {
    const result = readResponsesRequest({ model: "m", input: "hi", previous_response_id: "" });
    expect(result.ok && result.request.previousResponseId).toBeUndefined();
  });

  it("given parts that are not text, then each stands in as its JSON, and earlier assistant text reads as text", () => {
    const image = { type: "input_image", image_url: "https://example.com/cat.png", detail: "auto" };
    const result = readResponsesRequest({
      model: "m",
      input: [
        { role: "user", content: [{ type: "input_text", text: "Describe:" }, image] },
        { role: "assistant", content: [{ type: "output_text", text: "A cat." }] },
        { role: "system", content: [{ type: "input_text", text: "Be brief." }] },
      ],
    });
    expect(result).toMatchObject({
      ok: true,
      request: { firstMessage: `Describe:\n${JSON.stringify(image)}`, systemPrompt: "Be brief." },
    });
  });

  it("given a conversation that starts with a tool's output, then that item stands in as its JSON", () => {
    const output = { type: "function_call_output", call_id: "call_1", output: "18C" };
    const result = readResponsesRequest({
      model: "m",
      previous_response_id: "resp_1",
      input: [output, { role: "user", content: "thanks" }],
    });
    expect(result.ok && result.request.firstMessage).toBe(JSON.stringify(output));
  });

  it.each([
    ["a string body", "hello", null],
    ["an array body", [], null],
    ["a missing model", { input: "hi" }, "model"],
    ["an empty model", { model: "", input: "hi" }, "model"],
    ["a string stream flag", { model: "m", stream: "true", input: "hi" }, "stream"],
    ["input as a number", { model: "m", input: 3 }, "input"],
    ["input as an object", { model: "m", input: { role: "user", content: "hi" } }, "input"],
    ["instructions as an array", { model: "m", input: "hi", instructions: ["a"] }, "instructions"],
    ["a numeric previous_response_id", { model: "m", previous_response_id: 7 }, "previous_response_id"],
    ["metadata as an array", { model: "m", metadata: [], input: "hi" }, "metadata"],
    ["an item that is a string", { model: "m", input: [{ role: "user", content: "" }, "hi"] }, "input[1]"],
    ["a role that is a number", { model: "m", input: [{ role: 1, content: "hi" }] }, "input[0].role"],
    ["content as a number", { model: "m", input: [{ role: "user", content: 3 }] }, "input[0].content"],
  ])("given %s, then it is refused naming the param", (_case, body, param) => {
    const result = readResponsesRequest(body);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.param).toBe(param);
    expect(result.error.message.length).toBeGreaterThan(0);
    if (param !== null) expect(result.error.message).toContain(`'${param}'`);
  });
});
