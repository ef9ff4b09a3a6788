import { describe, expect, it } from "vitest";
import { callDirective } from "../directives.js";
import { planReply } from "../reply.js";
import { parseEvents } from "../test-client.js";
import { toResponsesRequest } from "./request.js";
import { type ResponsePlan, responseBody, responseEvents, responseId, usageOf } from "./response.js";

const weatherTool = { type: "function", name: "get_weather", parameters: { type: "object" } };

function plan(body: Record<string, unknown>): ResponsePlan {
  const request = toResponsesRequest({ model: "gpt-4o-mini", ...body });
  const reply = planReply(request, "resp_x");
  return { id: "resp_x", createdAt: 1, request, reply, usage: usageOf(12, reply.completionTokens, 0) };
}

type Event = { type: string; sequence_number: number; [field: string]: unknown };

function events(of: ResponsePlan): Event[] {
  return parseEvents(responseEvents(of)).map(({ event, data }) => {
    expect((data as Event).type).toBe(event);
    return data as Event;
  });
}

describe("responseId", () => {
  it("looks like OpenAI's and is never the same twice", () => {
    expect(responseId()).toMatch(/^resp_[0-9a-f]{50}$/);
    expect(responseId()).not.toBe(responseId());
  });
});

describe("responseBody", () => {
  it("carries the output, usage, and the request's settings", () => {
    const body = JSON.parse(responseBody(plan({ input: "what is the weather like", metadata: { a: "b" } })));
    expect(body).toMatchObject({
      id: "resp_x",
      object: "response",
      status: "completed",
      completed_at: 1,
      metadata: { a: "b" },
      output: [
        {
          type: "message",
          status: "completed",
          content: [{ text: "Fake reply to: what is the weather like" }],
        },
      ],
      usage: {
        input_tokens: 12,
        output_tokens: 10,
        total_tokens: 22,
        input_tokens_details: { cached_tokens: 0 },
      },
    });
  });

  it("is incomplete when max_output_tokens cut the reply", () => {
    const body = JSON.parse(responseBody(plan({ input: "x".repeat(100), max_output_tokens: 16 })));
    expect(body).toMatchObject({
      status: "incomplete",
      completed_at: null,
      incomplete_details: { reason: "max_output_tokens" },
      output: [{ status: "incomplete" }],
    });
  });
});

describe("responseEvents", () => {
  it("numbers every event, opens and closes the message around its text deltas, and ends with the response", () => {
    const text = plan({ input: "what is the weather like" });
    const stream = events(text);

    expect(stream.map((event) => event.sequence_number)).toEqual(stream.map((_, index) => index));
    expect(stream.map((event) => event.type)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      ...Array(8).fill("response.output_text.delta"),
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(stream[0]).toMatchObject({ response: { status: "in_progress", output: [], usage: null } });
    expect(stream[2]).toMatchObject({
      output_index: 0,
      item: { type: "message", status: "in_progress", content: [] },
    });
    const deltas = stream.filter((event) => event.type === "response.output_text.delta");
    expect(deltas.map((event) => event.delta).join("")).toBe(text.reply.content);
    expect(deltas[0]).toMatchObject({
      item_id: (stream[2]!.item as { id: string }).id,
      output_index: 0,
      content_index: 0,
    });
    expect(stream.at(-1)).toEqual({
      type: "response.completed",
      sequence_number: stream.length - 1,
      response: JSON.parse(responseBody(text)),
    });
  });

  it("streams each function call as an item whose arguments come in fragments", () => {
    const calls = plan({
      tools: [weatherTool],
      input: `${callDirective("get_weather", { city: "Paris", unit: "celsius" })} ${callDirective("get_weather")}`,
    });
    const stream = events(calls);

    const added = stream.filter((event) => event.type === "response.output_item.added");
    expect(added.map((event) => event.item)).toEqual([
      expect.objectContaining({
        type: "function_call",
        status: "in_progress",
        arguments: "",
        name: "get_weather",
      }),
      expect.objectContaining({
        type: "function_call",
        status: "in_progress",
        arguments: "",
        name: "get_weather",
      }),
    ]);
    const first = stream.filter(
      (event) => event.type === "response.function_call_arguments.delta" && event.output_index === 0,
    );
    expect(first.length).toBeGreaterThanOrEqual(4);
    expect(first.map((event) => event.delta).join("")).toBe('{"city":"Paris","unit":"celsius"}');
    expect(stream.filter((event) => event.type === "response.function_call_arguments.done")).toEqual([
      expect.objectContaining({
        output_index: 0,
        name: "get_weather",
        arguments: '{"city":"Paris","unit":"celsius"}',
      }),
      expect.objectContaining({ output_index: 1, name: "get_weather", arguments: "{}" }),
    ]);
    const done = stream.filter((event) => event.type === "response.output_item.done");
    expect(done.map((event) => (event.item as { status: string }).status)).toEqual([
      "completed",
      "completed",
    ]);
  });

  it("ends a cut reply with response.incomplete", () => {
    const stream = events(plan({ input: "x".repeat(100), max_output_tokens: 16 }));
    expect(stream.at(-1)).toMatchObject({ type: "response.incomplete", response: { status: "incomplete" } });
  });
});
