import { AnswerTooLargeError } from "./errors.js";
import { parseObject } from "./json.js";

/**
 * One Server-Sent-Events block as it arrived. `raw` is the exact text of the block, the
 * blank line that ends it included, so a proxy can forward events byte-for-byte while it
 * reads them.
 */
export interface SseEvent {
  readonly raw: string;
  /** Every `data` line of the block, joined by "\n"; undefined when the block had none. */
  readonly data: string | undefined;
  readonly event: string | undefined;
  readonly id: string | undefined;
  /** The block held comment lines (`:` first) and nothing else: a keepalive. */
  readonly comment: boolean;
}

const BOM = "\uFEFF";
const LINE_END = /\r\n|\r|\n/g;

export interface SseParserOptions {
  /**
   * The most bytes one event may take while it is still incomplete (a line that never
   * ends, lines that never meet a blank one): past it, `push` throws AnswerTooLargeError
   * and the parser takes nothing more. Unset: no bound.
   */
  readonly maxEventBytes?: number;
}

/**
 * Incremental SSE parser for proxying. Feed it the upstream body chunk by chunk; each
 * `push` returns the events that chunk completed. Line endings may be "\n", "\r\n" or
 * "\r", and a chunk may end anywhere, inside a line or inside a UTF-8 character.
 *
 * Each chunk is scanned once, and an event spread over many chunks is joined once, when
 * it ends: its pieces are kept apart until then, so a long line costs its length, not its
 * length times its chunks (joining at every chunk took 20 s of one CPU for a 16 MiB line).
 */
export class SseParser {
  readonly #decoder = new TextDecoder("utf-8");
  readonly #maxEventBytes: number;
  // The current event's text received so far, in the pieces it came in: its raw text.
  #raw: string[] = [];
  // The current line's text so far (it has no line end yet), in pieces.
  #line: string[] = [];
  // A "\r" that ended a chunk: it may be the first half of "\r\n", so it is read with the next.
  #carry = "";
  // Bytes of the current event so far, and whether it went past the bound.
  #eventBytes = 0;
  #overflowed = false;
  #started = false;
  #data: string | undefined = undefined;
  #event: string | undefined = undefined;
  #id: string | undefined = undefined;
  #sawField = false;
  #sawComment = false;

  constructor(options: SseParserOptions = {}) {
    this.#maxEventBytes = options.maxEventBytes ?? Number.POSITIVE_INFINITY;
  }

  push(chunk: Uint8Array | string): SseEvent[] {
    if (this.#overflowed) throw this.#tooLarge();
    let text = typeof chunk === "string" ? chunk : this.#decoder.decode(chunk, { stream: true });
    if (!this.#started && text.length > 0) {
      this.#started = true;
      // TextDecoder already drops a leading BOM from bytes; strings arrive with it intact.
      if (text.startsWith(BOM)) text = text.slice(1);
    }
    if (this.#carry !== "") {
      text = this.#carry + text;
      this.#carry = "";
    }
    if (text.endsWith("\r")) {
      this.#carry = "\r";
      text = text.slice(0, -1);
    }
    if (text.length === 0) return [];
    const events = this.#consume(
      text,
      typeof chunk === "string" ? Buffer.byteLength(chunk) : chunk.byteLength,
    );
    if (this.#eventBytes > this.#maxEventBytes) {
      this.#overflowed = true;
      // What this chunk completed goes out; the next push says the rest is too large.
      if (events.length === 0) throw this.#tooLarge();
    }
    return events;
  }

  /**
   * End of stream. Returns what is still buffered as a last event, even without its
   * terminating blank line: a browser would drop it, but a proxy should still forward
   * the bytes, and its `raw` is exactly what arrived.
   */
  flush(): SseEvent[] {
    if (this.#overflowed) throw this.#tooLarge();
    const text = this.#carry + this.#decoder.decode();
    this.#carry = "";
    const events = text.length === 0 ? [] : this.#consume(text, Buffer.byteLength(text));
    if (this.#line.length > 0) this.#readLine(this.#line.join(""));
    if (this.#raw.length > 0) events.push(this.#dispatch(this.#raw.join("")));
    this.#raw = [];
    this.#line = [];
    this.#eventBytes = 0;
    this.#started = false;
    return events;
  }

  /** Reads one piece of the stream (never ending in a "\r" that may be half of "\r\n"). */
  #consume(text: string, bytes: number): SseEvent[] {
    const events: SseEvent[] = [];
    // Where the current event starts in `text`; -1 when it started in an earlier piece.
    let eventFrom = this.#raw.length === 0 && this.#line.length === 0 ? 0 : -1;
    let lineFrom = 0;
    LINE_END.lastIndex = 0;
    for (let match = LINE_END.exec(text); match !== null; match = LINE_END.exec(text)) {
      const lineEnd = match.index;
      const next = lineEnd + match[0].length;
      const piece = text.slice(lineFrom, lineEnd);
      const line = this.#line.length === 0 ? piece : this.#line.join("") + piece;
      this.#line = [];
      if (line.length === 0) {
        const raw = eventFrom === -1 ? this.#raw.join("") + text.slice(0, next) : text.slice(eventFrom, next);
        this.#raw = [];
        events.push(this.#dispatch(raw));
        eventFrom = next;
      } else {
        this.#readLine(line);
      }
      lineFrom = next;
    }
    if (lineFrom < text.length) this.#line.push(text.slice(lineFrom));
    if (eventFrom === -1) {
      this.#raw.push(text);
      this.#eventBytes += bytes;
    } else if (eventFrom < text.length) {
      const rest = eventFrom === 0 ? text : text.slice(eventFrom);
      this.#raw.push(rest);
      this.#eventBytes = eventFrom === 0 ? bytes : Buffer.byteLength(rest);
    } else {
      this.#eventBytes = 0;
    }
    return events;
  }

  #tooLarge(): AnswerTooLargeError {
    return new AnswerTooLargeError("event", this.#maxEventBytes);
  }

  #readLine(line: string): void {
    const colon = line.indexOf(":");
    if (colon === 0) {
      this.#sawComment = true;
      return;
    }
    this.#sawField = true;
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = "";
    if (colon !== -1) {
      const from = line.charCodeAt(colon + 1) === 0x20 ? colon + 2 : colon + 1;
      value = line.slice(from);
    }
    if (field === "data") {
      this.#data = this.#data === undefined ? value : `${this.#data}\n${value}`;
    } else if (field === "event") {
      this.#event = value;
    } else if (field === "id") {
      // The spec ignores ids containing NUL: they could never be sent back as Last-Event-ID.
      if (!value.includes("\0")) this.#id = value;
    }
  }

  #dispatch(raw: string): SseEvent {
    const event: SseEvent = {
      raw,
      data: this.#data,
      event: this.#event,
      id: this.#id,
      comment: this.#sawComment && !this.#sawField,
    };
    this.#data = undefined;
    this.#event = undefined;
    this.#id = undefined;
    this.#sawField = false;
    this.#sawComment = false;
    return event;
  }
}

/** One `data:` event carrying `json`. JSON text has no raw line breaks, so one line suffices. */
export function formatSseData(json: unknown): string {
  return `data: ${JSON.stringify(json) ?? "null"}\n\n`;
}

/**
 * One named event carrying `json`: `event: <name>` then its data, the way Anthropic's and
 * the Responses API's streams send every event. `name` is the gateway's own, never a
 * client's, so it holds no line break.
 */
export function formatSseEvent(name: string, json: unknown): string {
  return `event: ${name}\n${formatSseData(json)}`;
}

// A typed event's JSON that begins with its type, as the providers send it: `{"type":"…"`.
const LEADING_TYPE = /^\s*\{\s*"type"\s*:\s*"([^"\\]*)"/;

/**
 * The type of a typed stream event (Anthropic's, the Responses API's): its `event:` name,
 * or, from a provider that sends data lines only, the `type` its JSON carries. Read from
 * the first characters where they hold it, so most events are typed without a parse.
 */
export function eventType(event: SseEvent): string | undefined {
  if (event.event !== undefined) return event.event;
  const data = event.data;
  if (data === undefined) return undefined;
  const leading = LEADING_TYPE.exec(data);
  if (leading !== null) return leading[1];
  const json = parseObject(data);
  return json !== undefined && typeof json.type === "string" ? json.type : undefined;
}

/**
 * A comment block, which clients ignore: a keepalive for a stream that must stay open
 * while nothing is sent. Line breaks in `text` would end the comment early, so they
 * become spaces.
 */
export function formatSseComment(text = ""): string {
  return `: ${text.replace(/\r\n|\r|\n/g, " ")}\n\n`;
}

/** The terminator OpenAI-compatible streams end with. */
export const SSE_DONE = "data: [DONE]\n\n";
