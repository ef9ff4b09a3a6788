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
// A lone "\r" at the end of the buffer may be the first half of "\r\n"; it is matched
// here but only acted on once the next character is known (see `scan`).
const LINE_END = /\r\n|\r|\n/g;

/**
 * Incremental SSE parser for proxying. Feed it the upstream body chunk by chunk; each
 * `push` returns the events that chunk completed. Line endings may be "\n", "\r\n" or
 * "\r", and a chunk may end anywhere, inside a line or inside a UTF-8 character.
 */
export class SseParser {
  readonly #decoder = new TextDecoder("utf-8");
  // Undispatched text. It always starts at the first character of the current event.
  #buffer = "";
  // Where the next unread line starts in #buffer, and where to look for its end: a long
  // line split over many chunks is searched once, not once per chunk.
  #lineStart = 0;
  #searchFrom = 0;
  #started = false;
  #data: string | undefined = undefined;
  #event: string | undefined = undefined;
  #id: string | undefined = undefined;
  #sawField = false;
  #sawComment = false;

  push(chunk: Uint8Array | string): SseEvent[] {
    let text = typeof chunk === "string" ? chunk : this.#decoder.decode(chunk, { stream: true });
    if (!this.#started && text.length > 0) {
      this.#started = true;
      // TextDecoder already drops a leading BOM from bytes; strings arrive with it intact.
      if (text.startsWith(BOM)) text = text.slice(1);
    }
    if (text.length === 0) return [];
    this.#buffer = this.#buffer.length === 0 ? text : this.#buffer + text;
    return this.#scan(false);
  }

  /**
   * End of stream. Returns what is still buffered as a last event, even without its
   * terminating blank line: a browser would drop it, but a proxy should still forward
   * the bytes, and its `raw` is exactly what arrived.
   */
  flush(): SseEvent[] {
    this.#buffer += this.#decoder.decode();
    const events = this.#scan(true);
    if (this.#lineStart < this.#buffer.length) this.#readLine(this.#buffer.slice(this.#lineStart));
    if (this.#buffer.length > 0) events.push(this.#dispatch(this.#buffer));
    this.#buffer = "";
    this.#lineStart = 0;
    this.#searchFrom = 0;
    this.#started = false;
    return events;
  }

  #scan(final: boolean): SseEvent[] {
    const events: SseEvent[] = [];
    const buffer = this.#buffer;
    let eventStart = 0;
    let lineStart = this.#lineStart;
    let searchFrom = buffer.length;
    LINE_END.lastIndex = this.#searchFrom;
    for (let match = LINE_END.exec(buffer); match !== null; match = LINE_END.exec(buffer)) {
      const lineEnd = match.index;
      const next = lineEnd + match[0].length;
      if (!final && next === buffer.length && match[0] === "\r") {
        searchFrom = lineEnd;
        break;
      }
      if (lineEnd === lineStart) {
        events.push(this.#dispatch(buffer.slice(eventStart, next)));
        eventStart = next;
      } else {
        this.#readLine(buffer.slice(lineStart, lineEnd));
      }
      lineStart = next;
    }
    this.#buffer = eventStart === 0 ? buffer : buffer.slice(eventStart);
    this.#lineStart = lineStart - eventStart;
    this.#searchFrom = searchFrom - eventStart;
    return events;
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
