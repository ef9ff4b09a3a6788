import { randomUUID } from "node:crypto";
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import type { ApiName } from "./api.js";

/**
 * How a request ended, or that it has not yet: "aborted" means the client went away, "reset"
 * that the fake cut the connection (a fault it was asked for, or `close()`).
 */
export type FakeRequestState = "open" | "paused" | "done" | "aborted" | "reset";

/** One request as the fake received it, and how its response is going. */
export interface FakeRequest {
  /** Also sent back as `x-request-id`. */
  readonly id: string;
  readonly method: string;
  /** The request target as sent, query string included. */
  readonly path: string;
  /** Which API the request called, by its method and path; undefined for any other route. */
  readonly api: ApiName | undefined;
  /** Lowercased names, Authorization included: asserting what was forwarded is the point. */
  readonly headers: IncomingHttpHeaders;
  /** The parsed JSON body, or undefined when the body was empty or not JSON. */
  readonly body: unknown;
  readonly rawBody: string;
  /**
   * The key it authenticates with, if any: the bearer token, or on Anthropic's routes `x-api-key`
   * first (`@anthropic-ai/sdk` 1.x sends its key as a bearer token, older clients as `x-api-key`).
   */
  readonly apiKey: string | undefined;
  /** Clock time (ms) when the body had arrived. */
  readonly receivedAt: number;
  /** The response status, once headers were sent. */
  readonly status: number | undefined;
  readonly state: FakeRequestState;
  /** Stream events written so far (`[DONE]` and Anthropic's `ping` count). */
  readonly chunksSent: number;
  /** The response body as sent so far: the JSON, or the stream's events as written. */
  readonly responseBody: string;
  /** Settles when the response ended in any way, with how it ended. */
  readonly done: Promise<FakeRequestState>;
  /** Lets a stream held by `x-fake-pause-after` go on. */
  resume(): void;
}

/** A request and the progress of its response; the fake's only mutable record of it. */
export class Exchange implements FakeRequest {
  readonly id = `req_${randomUUID().replaceAll("-", "")}`;
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: unknown;
  readonly apiKey: string | undefined;
  status: number | undefined = undefined;
  state: FakeRequestState = "open";
  chunksSent = 0;
  responseBody = "";
  readonly done: Promise<FakeRequestState>;
  readonly startedAt = performance.now();

  readonly #ended = new AbortController();
  readonly #changed: (exchange: Exchange) => void;
  #settleDone: (state: FakeRequestState) => void = () => {};
  #resumed: (() => void) | undefined;

  constructor(
    req: IncomingMessage,
    readonly api: ApiName | undefined,
    readonly rawBody: string,
    readonly receivedAt: number,
    changed: (exchange: Exchange) => void,
  ) {
    this.method = req.method ?? "GET";
    this.path = req.url ?? "/";
    this.headers = req.headers;
    this.body = parseBody(rawBody);
    const token = bearer(req.headers.authorization);
    this.apiKey = api?.startsWith("anthropic_") ? (xApiKey(req.headers["x-api-key"]) ?? token) : token;
    this.#changed = changed;
    this.done = new Promise((resolve) => {
      this.#settleDone = resolve;
    });
  }

  /** Aborted once the response has ended, however it ended. */
  get signal(): AbortSignal {
    return this.#ended.signal;
  }

  chunkSent(): void {
    this.chunksSent += 1;
    this.#changed(this);
  }

  /** Holds the response until `resume()` or until it ends. */
  pause(): Promise<void> {
    if (this.signal.aborted) return Promise.resolve();
    this.state = "paused";
    const resumed = new Promise<void>((resolve) => {
      this.#resumed = resolve;
    });
    this.#changed(this);
    return resumed;
  }

  resume(): void {
    if (this.state !== "paused") return;
    this.state = "open";
    this.#resumed?.();
    this.#resumed = undefined;
    this.#changed(this);
  }

  settle(state: "done" | "aborted" | "reset"): void {
    if (this.signal.aborted) return;
    this.state = state;
    this.#ended.abort();
    this.#resumed?.();
    this.#resumed = undefined;
    this.#settleDone(state);
    this.#changed(this);
  }
}

function bearer(authorization: string | undefined): string | undefined {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? "");
  return match?.[1];
}

function xApiKey(header: string | string[] | undefined): string | undefined {
  const value = (Array.isArray(header) ? header[0] : header)?.trim();
  return value === "" ? undefined : value;
}

function parseBody(rawBody: string): unknown {
  if (rawBody === "") return undefined;
  try {
    return JSON.parse(rawBody);
  } catch {
    return undefined;
  }
}
