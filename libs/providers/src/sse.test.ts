import { describe, expect, it } from "vitest";
import { AnswerTooLargeError } from "./errors.js";
import {
  eventType,
  formatSseComment,
  formatSseData,
  formatSseEvent,
  SSE_DONE,
  type SseEvent,
  SseParser,
} from "./sse.js";

const encoder = new TextEncoder();

/** Every event the parser gives for `chunks`, flush included. */
function parse(chunks: readonly (Uint8Array | string)[]): SseEvent[] {
  const parser = new SseParser();
  const events = chunks.flatMap((chunk) => parser.push(chunk));
  return [...events, ...parser.flush()];
}

// Multi-byte characters (2, 3 and 4 bytes in UTF-8), a comment, a multi-line data field,
// event and id fields, a field without a colon and a field without the optional space.
const SAMPLE = [
  ": keepalive\n\n",
  'data: {"content":"héllo wörld"}\n\n',
  "event: delta\nid: 42\ndata: first line\ndata: second line — 🌍\n\n",
  "data:no-space\ndata\n\n",
  "data: [DONE]\n\n",
].join("");

const SAMPLE_EVENTS = [
  { raw: ": keepalive\n\n", data: undefined, event: undefined, id: undefined, comment: true },
  {
    raw: 'data: {"content":"héllo wörld"}\n\n',
    data: '{"content":"héllo wörld"}',
    event: undefined,
    id: undefined,
    comment: false,
  },
  {
    raw: "event: delta\nid: 42\ndata: first line\ndata: second line — 🌍\n\n",
    data: "first line\nsecond line — 🌍",
    event: "delta",
    id: "42",
    comment: false,
  },
  { raw: "data:no-space\ndata\n\n", data: "no-space\n", event: undefined, id: undefined, comment: false },
  { raw: "data: [DONE]\n\n", data: "[DONE]", event: undefined, id: undefined, comment: false },
];

describe("SseParser", () => {
  it("given a whole stream in one chunk, then it yields each event with its exact raw text", () => {
    expect(parse([SAMPLE])).toEqual(SAMPLE_EVENTS);
  });

  it("given the stream's bytes split in two at every position, then events and raw bytes never change", () => {
    const bytes = encoder.encode(SAMPLE);
    for (let cut = 0; cut <= bytes.length; cut++) {
      const events = parse([bytes.subarray(0, cut), bytes.subarray(cut)]);
      expect(events, `cut at byte ${cut}`).toEqual(SAMPLE_EVENTS);
    }
  });

  it("given the stream's bytes split in three at every pair of positions, then events never change", () => {
    const bytes = encoder.encode(SAMPLE);
    const expected = JSON.stringify(SAMPLE_EVENTS);
    const wrongCuts: string[] = [];
    for (let a = 0; a <= bytes.length; a++) {
      for (let b = a; b <= bytes.length; b++) {
        const events = parse([bytes.subarray(0, a), bytes.subarray(a, b), bytes.subarray(b)]);
        if (JSON.stringify(events) !== expected) wrongCuts.push(`${a}/${b}`);
      }
    }
    expect(wrongCuts).toEqual([]);
  });

  it("given one byte per chunk, then each event comes out as soon as its blank line arrives", () => {
    const bytes = encoder.encode('data: {"a":1}\n\ndata: 2\n\n');
    const parser = new SseParser();
    const completedAt: number[] = [];
    for (let i = 0; i < bytes.length; i++) {
      if (parser.push(bytes.subarray(i, i + 1)).length > 0) completedAt.push(i);
    }
    expect(completedAt).toEqual([14, 23]);
    expect(parser.flush()).toEqual([]);
  });

  it("given CRLF line endings split between \\r and \\n, then raw keeps every \\r\\n and data has none", () => {
    const text = "event: message\r\ndata: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n";
    for (let cut = 0; cut <= text.length; cut++) {
      const events = parse([text.slice(0, cut), text.slice(cut)]);
      expect(events, `cut at ${cut}`).toEqual([
        {
          raw: "event: message\r\ndata: a\r\ndata: b\r\n\r\n",
          data: "a\nb",
          event: "message",
          id: undefined,
          comment: false,
        },
        { raw: "data: c\r\n\r\n", data: "c", event: undefined, id: undefined, comment: false },
      ]);
    }
  });

  it("given bare \\r line endings, then they end lines and events too", () => {
    const events = parse(["data: a\rdata: b\r\rdata: c\r\r"]);
    expect(events.map((e) => [e.raw, e.data])).toEqual([
      ["data: a\rdata: b\r\r", "a\nb"],
      ["data: c\r\r", "c"],
    ]);
  });

  it("given a comment between fields, then the block is not a comment and the comment is not data", () => {
    const [event] = parse([": note\ndata: x\n: another\n\n"]);
    expect(event).toMatchObject({ data: "x", comment: false, raw: ": note\ndata: x\n: another\n\n" });
  });

  it("given a comment-only block of several lines, then it is one comment event", () => {
    expect(parse([": a\n:b\n\n"])).toEqual([
      { raw: ": a\n:b\n\n", data: undefined, event: undefined, id: undefined, comment: true },
    ]);
  });

  it("given a leading BOM as bytes or as text, then it is dropped and the first event parses", () => {
    const bom = new Uint8Array([0xef, 0xbb, 0xbf]);
    const body = encoder.encode("data: x\n\n");
    const fromBytes = parse([bom.subarray(0, 1), bom.subarray(1), body]);
    const fromText = parse(["\uFEFFdata: x\n\n"]);
    for (const events of [fromBytes, fromText]) {
      expect(events).toEqual([
        { raw: "data: x\n\n", data: "x", event: undefined, id: undefined, comment: false },
      ]);
    }
  });

  it("given a BOM later in the stream, then it is content, not stripped", () => {
    const [, second] = parse(["data: a\n\n", "data: \uFEFFb\n\n"]);
    expect(second?.data).toBe("\uFEFFb");
  });

  it("given blank lines between events, then each is forwarded so the bytes add up", () => {
    const text = "data: a\n\n\ndata: b\n\n";
    const events = parse([text]);
    expect(events.map((e) => e.raw).join("")).toBe(text);
    expect(events.map((e) => e.data)).toEqual(["a", undefined, "b"]);
  });

  it("given a stream that ends without a blank line, when flushed, then the tail comes out as it arrived", () => {
    const parser = new SseParser();
    expect(parser.push("data: a\n\ndata: tail")).toHaveLength(1);
    expect(parser.flush()).toEqual([
      { raw: "data: tail", data: "tail", event: undefined, id: undefined, comment: false },
    ]);
  });

  it("given a stream ending in a lone \\r, when flushed, then the \\r ends the event", () => {
    const parser = new SseParser();
    expect(parser.push("data: a\r\r")).toEqual([]);
    expect(parser.flush()).toEqual([
      { raw: "data: a\r\r", data: "a", event: undefined, id: undefined, comment: false },
    ]);
  });

  it("given an id containing NUL, then the id is ignored", () => {
    const [event] = parse(["id: a\0b\ndata: x\n\n"]);
    expect(event?.id).toBeUndefined();
  });

  it("given a stream cut inside a UTF-8 character, when flushed, then the broken character becomes U+FFFD", () => {
    const bytes = encoder.encode("data: é");
    const events = parse([bytes.subarray(0, bytes.length - 1)]);
    expect(events[0]?.data).toBe("\uFFFD");
  });

  it("given a long line spread over many chunks, then it is read once whole", () => {
    const payload = "x".repeat(10_000);
    const text = `data: ${payload}\n\n`;
    const chunks: string[] = [];
    for (let i = 0; i < text.length; i += 7) chunks.push(text.slice(i, i + 7));
    expect(parse(chunks).map((e) => e.data)).toEqual([payload]);
  });
});

describe("SseParser with maxEventBytes", () => {
  const bounded = () => new SseParser({ maxEventBytes: 1_024 });
  const kib = new Uint8Array(512).fill(0x61); // "a" × 512

  it("given a line that never ends, then it refuses the event once it is past the bound, and nothing after", () => {
    const parser = bounded();
    expect(parser.push("data: ")).toEqual([]);
    expect(parser.push(kib)).toEqual([]);
    expect(() => parser.push(kib)).toThrow(AnswerTooLargeError);
    expect(() => parser.push("\n\n")).toThrow(/larger than 1024 bytes/);
    expect(() => parser.flush()).toThrow(AnswerTooLargeError);
  });

  it("given lines that never meet a blank one, then the event they make is refused too", () => {
    const parser = bounded();
    expect(() => {
      for (let i = 0; i < 100; i++) parser.push("data: some more\n");
    }).toThrow(expect.objectContaining({ what: "event", limitBytes: 1_024 }));
  });

  it("counts bytes, not characters", () => {
    // 400 three-byte characters: 1,200 bytes in 400 characters.
    expect(() => bounded().push(`data: ${"€".repeat(400)}`)).toThrow(AnswerTooLargeError);
    expect(bounded().push(`data: ${"€".repeat(300)}\n\n`)).toHaveLength(1);
  });

  it("given the events a chunk completed before one past the bound, then they come out first", () => {
    const parser = bounded();
    const events = parser.push(`data: a\n\ndata: b\n\ndata: ${"c".repeat(2_000)}`);
    expect(events.map((e) => e.data)).toEqual(["a", "b"]);
    expect(() => parser.push("\n\n")).toThrow(AnswerTooLargeError);
  });

  it("given many events each within the bound, then none is refused however long the stream", () => {
    const parser = bounded();
    const event = `data: ${"x".repeat(900)}\n\n`;
    let count = 0;
    for (let i = 0; i < 2_000; i++)
      count += parser.push(event.slice(0, 450)).length + parser.push(event.slice(450)).length;
    expect(count + parser.flush().length).toBe(2_000);
  });

  it("given a 16 MiB line in 64 KiB chunks, then it is read whole", () => {
    const parser = new SseParser({ maxEventBytes: 32 * 1024 * 1024 });
    const chunk = new Uint8Array(64 * 1024).fill(0x78);
    expect(parser.push("data: ")).toEqual([]);
    for (let i = 0; i < 256; i++) expect(parser.push(chunk)).toEqual([]);
    const [event] = parser.push("\n\n");
    expect(event?.data).toHaveLength(16 * 1024 * 1024);
    expect(event?.raw).toHaveLength(16 * 1024 * 1024 + "data: \n\n".length);
  });
});

describe("formatSseData", () => {
  it("given a JSON value, then it is one data line that the parser reads back", () => {
    const value = { text: "line\nbreak", n: 1 };
    const formatted = formatSseData(value);
    expect(formatted).toBe('data: {"text":"line\\nbreak","n":1}\n\n');
    const [event] = parse([formatted]);
    expect(JSON.parse(event?.data ?? "")).toEqual(value);
  });

  it("given undefined, then it still writes valid JSON", () => {
    expect(formatSseData(undefined)).toBe("data: null\n\n");
  });
});

describe("formatSseComment", () => {
  it("given text with line breaks, then the parser sees one comment block", () => {
    const events = parse([formatSseComment("held\r\nwaiting"), SSE_DONE]);
    expect(events.map((e) => [e.comment, e.data])).toEqual([
      [true, undefined],
      [false, "[DONE]"],
    ]);
  });
});

describe("formatSseEvent", () => {
  it("given a name and JSON, then the parser reads back that name and that JSON", () => {
    const text = formatSseEvent("error", { type: "error", error: { message: "a\nb" } });
    expect(text).toBe('event: error\ndata: {"type":"error","error":{"message":"a\\nb"}}\n\n');
    expect(parse([text])).toEqual([
      {
        raw: text,
        data: '{"type":"error","error":{"message":"a\\nb"}}',
        event: "error",
        id: undefined,
        comment: false,
      },
    ]);
  });
});

describe("eventType", () => {
  const typed = (data: string | undefined, event?: string): SseEvent => ({
    raw: "",
    data,
    event,
    id: undefined,
    comment: false,
  });

  it.each([
    ["the event name, over the data", typed('{"type":"b"}', "a"), "a"],
    ["a leading type", typed('{"type":"message_stop"}'), "message_stop"],
    ["a leading type with spaces", typed(' { "type" : "ping" }'), "ping"],
    ["a type that is not first", typed('{"index":0,"type":"content_block_stop"}'), "content_block_stop"],
    ["no type", typed('{"index":0}'), undefined],
    ["data that is not JSON", typed("[DONE]"), undefined],
    ["no data", typed(undefined), undefined],
  ])("given %s, then the type is read", (_case, event, type) => {
    expect(eventType(event)).toBe(type);
  });
});
