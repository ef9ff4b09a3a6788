// What the fake's own tests use to talk to it the way a client does; not part of the package.
import type { ToolCall, Usage } from "./openai-chat/completion.js";
import type { FakeProvider } from "./server.js";

export interface ToolCallDelta {
  readonly index: number;
  readonly id?: string;
  readonly type?: string;
  readonly function: { readonly name?: string; readonly arguments: string };
}

export interface Delta {
  readonly role?: string;
  readonly content?: string | null;
  readonly refusal?: null;
  readonly tool_calls?: readonly ToolCallDelta[];
}

/** A `chat.completion.chunk`, with the fields the tests read. */
export interface Chunk {
  readonly id: string;
  readonly object: string;
  readonly model: string;
  readonly usage?: unknown;
  readonly choices: ReadonlyArray<{
    readonly index: number;
    readonly delta: Delta;
    readonly logprobs: null;
    readonly finish_reason: string | null;
  }>;
}

/** A `chat.completion`, with the fields the tests read. */
export interface Completion {
  readonly id: string;
  readonly object: string;
  readonly model: string;
  readonly choices: ReadonlyArray<{
    readonly index: number;
    readonly message: {
      readonly role: string;
      readonly content: string | null;
      readonly tool_calls?: readonly ToolCall[];
    };
    readonly finish_reason: string;
  }>;
  readonly usage: Usage;
}

export interface WireError {
  readonly message: string;
  readonly type: string;
  readonly param: string | null;
  readonly code: string | null;
}

export async function completionOf(response: Response): Promise<Completion> {
  if (response.status !== 200)
    throw new Error(`expected 200, got ${response.status}: ${await response.text()}`);
  return (await response.json()) as Completion;
}

/** The `error` member of an OpenAI error body. */
export async function errorOf(response: Response): Promise<WireError> {
  return ((await response.json()) as { error: WireError }).error;
}

export const API_KEY = "sk-test-0000000000000000abcd";

export interface PostOptions {
  /** Default API_KEY; null sends none. */
  readonly apiKey?: string | null;
  readonly headers?: Record<string, string>;
  readonly signal?: AbortSignal;
}

export function postChat(
  provider: FakeProvider,
  body: unknown,
  options: PostOptions = {},
): Promise<Response> {
  return post(provider, "/v1/chat/completions", body, options);
}

/** Posts to any of OpenAI's routes with a bearer key. */
export function post(
  provider: FakeProvider,
  path: string,
  body: unknown,
  options: PostOptions = {},
): Promise<Response> {
  const apiKey = options.apiKey === undefined ? API_KEY : options.apiKey;
  return postJson(
    provider,
    path,
    body,
    {
      ...(apiKey === null ? {} : { authorization: `Bearer ${apiKey}` }),
      ...options.headers,
    },
    options.signal,
  );
}

/** Posts to one of Anthropic's routes with `x-api-key` and `anthropic-version`, as its SDK does. */
export function postAnthropic(
  provider: FakeProvider,
  path: string,
  body: unknown,
  options: PostOptions = {},
): Promise<Response> {
  const apiKey = options.apiKey === undefined ? API_KEY : options.apiKey;
  return postJson(
    provider,
    path,
    body,
    {
      "anthropic-version": "2023-06-01",
      ...(apiKey === null ? {} : { "x-api-key": apiKey }),
      ...options.headers,
    },
    options.signal,
  );
}

function postJson(
  provider: FakeProvider,
  path: string,
  body: unknown,
  headers: Record<string, string>,
  signal: AbortSignal | undefined,
): Promise<Response> {
  return fetch(`${provider.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
}

/** One server-sent event: its name when it has one, and its data. */
export interface NamedEvent {
  readonly event: string | undefined;
  readonly data: string;
}

/** Splits written events (as the fake's pure functions return them) into names and parsed data. */
export function parseEvents(events: readonly string[]): Array<{ event: string | undefined; data: unknown }> {
  return events.map((text) => {
    const { event, data } = parseEvent(text.replace(/\n\n$/, ""));
    return { event, data: JSON.parse(data) as unknown };
  });
}

function parseEvent(text: string): NamedEvent {
  const match = /^(?:event: (.*)\n)?data: (.*)$/s.exec(text);
  if (match === null) throw new Error(`not an event: ${text}`);
  return { event: match[1], data: match[2]! };
}

/** Reads a server-sent event stream one event at a time, as it arrives. */
export class EventReader {
  readonly #reader: ReadableStreamDefaultReader<Uint8Array>;
  readonly #decoder = new TextDecoder();
  #buffer = "";

  constructor(response: Response) {
    if (response.body === null) throw new Error("the response has no body");
    this.#reader = response.body.getReader();
  }

  /** The next event's data, or undefined once the stream ended; rejects when the stream breaks. */
  async next(): Promise<string | undefined> {
    const event = await this.nextEvent();
    if (event?.event !== undefined) throw new Error(`not a bare data event: ${event.event}`);
    return event?.data;
  }

  /** The next event with its name, or undefined once the stream ended. */
  async nextEvent(): Promise<NamedEvent | undefined> {
    for (;;) {
      const end = this.#buffer.indexOf("\n\n");
      if (end !== -1) {
        const event = this.#buffer.slice(0, end);
        this.#buffer = this.#buffer.slice(end + 2);
        return parseEvent(event);
      }
      const { done, value } = await this.#reader.read();
      if (done) {
        if (this.#buffer !== "") throw new Error(`the stream ended inside an event: ${this.#buffer}`);
        return undefined;
      }
      this.#buffer += this.#decoder.decode(value, { stream: true });
    }
  }

  /** Every remaining named event, and the error that ended the stream if it broke. */
  async restNamed(): Promise<{ events: NamedEvent[]; error: unknown }> {
    const events: NamedEvent[] = [];
    try {
      for (let event = await this.nextEvent(); event !== undefined; event = await this.nextEvent()) {
        events.push(event);
      }
      return { events, error: undefined };
    } catch (error) {
      return { events, error };
    }
  }

  /** Every remaining event, and the error that ended the stream if it broke. */
  async rest(): Promise<{ events: string[]; error: unknown }> {
    const events: string[] = [];
    try {
      for (let event = await this.next(); event !== undefined; event = await this.next()) events.push(event);
      return { events, error: undefined };
    } catch (error) {
      return { events, error };
    }
  }
}

/** The JSON chunks of a complete stream; fails unless it ends with `[DONE]`. */
export function chunksOf(events: readonly string[]): Chunk[] {
  if (events.at(-1) !== "[DONE]") throw new Error(`the stream did not end with [DONE]: ${events.at(-1)}`);
  return events.slice(0, -1).map((event) => JSON.parse(event) as Chunk);
}
