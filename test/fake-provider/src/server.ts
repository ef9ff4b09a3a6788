import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { anthropicCountTokensApi, anthropicMessagesApi } from "./anthropic-messages/api.js";
import type { ErrorDialect, ModelApi } from "./api.js";
import { type Controls, readControls } from "./controls.js";
import { invalidUrl, modelNotFound, ProviderError, serverError } from "./errors.js";
import { Exchange, type FakeRequest } from "./exchange.js";
import { OPENAI_DIALECT } from "./openai.js";
import { openAiChatApi } from "./openai-chat/api.js";
import { openAiResponsesApi } from "./openai-responses/api.js";
import { ResponseMemory } from "./openai-responses/memory.js";
import { PromptCache } from "./prompt-cache.js";
import { type Clock, RateLimiter, type RateLimits, type WindowMode } from "./rate-limit.js";

export interface FakeProviderOptions {
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0: a free port, read it back from `FakeProvider.port`. */
  readonly port?: number;
  /**
   * Delay before the response headers of every model call (chat completion, response, message),
   * refusals included; header `x-fake-latency-ms` overrides.
   */
  readonly latencyMs?: number;
  /** Delay between stream events; header `x-fake-chunk-delay-ms` overrides. */
  readonly chunkDelayMs?: number;
  /** Requests per minute per API key. Default 1,000,000. */
  readonly rpm?: number;
  /** Tokens per minute per API key; also Anthropic's input and output limits. Default 100,000,000. */
  readonly tpm?: number;
  /** How every key's limits come back and what its answers say of them (see `WindowMode`); default `continuous`. */
  readonly windowMode?: WindowMode;
  /** Limits for particular API keys, over `rpm`, `tpm` and `windowMode`. */
  readonly limitsByKey?: Readonly<Record<string, Partial<RateLimits>>>;
  /** Time for the rate limits and `created`/`created_at`; default `Date.now`. */
  readonly clock?: Clock;
  /** Receives one line per finished request. */
  readonly log?: (line: string) => void;
  /**
   * Keep every request in `requests`. Default true; a long benchmark turns it off to hold memory
   * flat, and then `waitForRequest` sees only requests that arrive or change after it is called.
   */
  readonly recordRequests?: boolean;
}

export interface FakeProvider extends AsyncDisposable {
  /** Base URL without a trailing slash; clients use `${url}/v1`. */
  readonly url: string;
  readonly port: number;
  /** Every request received, in order (empty when `recordRequests` is false). */
  readonly requests: readonly FakeRequest[];
  /**
   * The first request, received or yet to come, for which `predicate` holds; it is checked again
   * whenever a request changes, so `(r) => r.state === "paused"` works. Rejects after `timeoutMs`.
   */
  waitForRequest(predicate?: (request: FakeRequest) => boolean, timeoutMs?: number): Promise<FakeRequest>;
  /** Resumes every paused stream. */
  resumePaused(): void;
  /** Stops listening and destroys every open connection. */
  close(): Promise<void>;
}

const MODELS = [
  { id: "gpt-4o-mini", object: "model", created: 1721172741, owned_by: "system" },
  { id: "gpt-4o", object: "model", created: 1715367049, owned_by: "system" },
  { id: "fake-unpriced-model", object: "model", created: 1735689600, owned_by: "holdfast" },
] as const;

const DEFAULT_WAIT_MS = 5_000;
// The headers that describe a key's window, which a key in `none` mode never sends: all but `retry-after`.
const WINDOW_FIGURES = /^(?:x-ratelimit-|anthropic-ratelimit-|retry-after-ms$)/;

export async function startFakeProvider(options: FakeProviderOptions = {}): Promise<FakeProvider> {
  const clock = options.clock ?? Date.now;
  const log = options.log;
  const recordRequests = options.recordRequests ?? true;
  const limiter = new RateLimiter(
    { rpm: options.rpm ?? 1_000_000, tpm: options.tpm ?? 100_000_000, mode: options.windowMode },
    options.limitsByKey ?? {},
    clock,
  );
  const deps = { limiter, promptCache: new PromptCache(), clock };
  const apis: ReadonlyMap<string, ModelApi> = new Map<string, ModelApi>([
    ["/v1/chat/completions", openAiChatApi(deps)],
    ["/v1/responses", openAiResponsesApi(deps, new ResponseMemory())],
    ["/v1/messages", anthropicMessagesApi(deps)],
    ["/v1/messages/count_tokens", anthropicCountTokensApi(deps)],
  ]);
  const requests: Exchange[] = [];
  // Unfinished exchanges, recorded or not, so resumePaused() reaches them all.
  const live = new Set<Exchange>();
  const waiters = new Set<(exchange: Exchange) => boolean>();
  let closing = false;

  const changed = (exchange: Exchange): void => {
    for (const waiter of waiters) if (waiter(exchange)) waiters.delete(waiter);
  };

  const server = createServer((req, res) => {
    // A rejection here means the client left before its body arrived (handle() logs its own
    // failures): nothing to record, nobody to answer.
    readBody(req)
      .then((rawBody) => handle(req, res, rawBody))
      .catch(() => res.destroy());
  });

  async function handle(req: IncomingMessage, res: ServerResponse, rawBody: string): Promise<void> {
    const path = (req.url ?? "/").split("?", 1)[0]!;
    const api = req.method === "POST" ? apis.get(path) : undefined;
    const exchange = new Exchange(req, api?.name, rawBody, clock(), changed);
    if (recordRequests) requests.push(exchange);
    live.add(exchange);
    let settled = false;
    const settle = () => {
      if (settled) return;
      settled = true;
      live.delete(exchange);
      exchange.settle(res.writableFinished ? "done" : closing ? "reset" : "aborted");
      log?.(
        `${exchange.method} ${exchange.path} ${exchange.status ?? "-"} ${exchange.state} ` +
          `${Math.round(performance.now() - exchange.startedAt)}ms`,
      );
    };
    res.once("close", settle);
    // The client may have gone between its body's end and now: its close is already past.
    if (res.socket === null || res.socket.destroyed) settle();
    changed(exchange);

    try {
      await (api === undefined ? route(exchange, res, path) : modelCall(api, exchange, res));
    } catch (error) {
      // A bug in the fake: say so in the log, and answer the way the provider answers its own.
      log?.(`${exchange.method} ${exchange.path} failed: ${error instanceof Error ? error.stack : error}`);
      if (res.headersSent) res.destroy();
      else fail(api ?? OPENAI_DIALECT, exchange, res, serverError());
    }
  }

  function route(exchange: Exchange, res: ServerResponse, path: string): void {
    const { method } = exchange;
    if (method === "GET" && path === "/health") {
      respond(exchange, res, { status: "ok" });
    } else if (method === "GET" && path === "/v1/models") {
      respond(exchange, res, { object: "list", data: MODELS });
    } else if (method === "GET" && path.startsWith("/v1/models/")) {
      const id = path.slice("/v1/models/".length);
      const model = MODELS.find((candidate) => candidate.id === id);
      if (model === undefined) fail(OPENAI_DIALECT, exchange, res, modelNotFound(id));
      else respond(exchange, res, model);
    } else {
      fail(OPENAI_DIALECT, exchange, res, invalidUrl(method, path));
    }
  }

  /** One model call, whichever API: the controls, the key, the body, the faults, then the answer. */
  async function modelCall(api: ModelApi, exchange: Exchange, res: ServerResponse): Promise<void> {
    // Once the key is known, every answer carries its rate-limit headers, as the providers' do,
    // unless the key's window mode is `none`.
    let apiKey: string | undefined;
    let controls: Controls | undefined;
    try {
      controls = readControls(exchange.headers);
      const latencyMs = controls.latencyMs ?? options.latencyMs ?? 0;
      if (latencyMs > 0) await wait(latencyMs, exchange.signal);
      if (exchange.signal.aborted) return;

      apiKey = api.authenticate(exchange);
      const call = api.parse(exchange);

      const fault = controls.fault;
      if (fault?.kind === "status") throw api.injectedFailure(fault.status, call);
      if (fault?.kind === "hang") return;
      if (fault?.kind === "reset") {
        exchange.settle("reset");
        res.socket?.resetAndDestroy();
        return;
      }

      const answer = api.answer(call, {
        apiKey,
        cachedTokens: controls.cachedTokens,
        usage: controls.usage,
        startedAt: exchange.startedAt,
      });
      const headers = {
        ...limitHeaders(api, apiKey),
        ...answer.headers,
        ...controls.rateLimits,
        [api.requestIdHeader]: exchange.id,
      };
      let resetAfter = fault?.kind === "reset-after" ? fault.after : undefined;
      if (fault?.kind === "invalid-json") {
        // A whole body that is not JSON (a stream's events too, as one body): half the answer.
        const whole = answer.events === undefined ? answer.body : answer.events.join("");
        return send(exchange, res, 200, whole.slice(0, Math.ceil(whole.length / 2)), headers);
      }

      if (answer.events !== undefined) {
        let events = answer.events;
        if (fault?.kind === "error-after") {
          events = events.slice(0, fault.after);
          events = [...events, api.streamError(apiKey, events.length)];
          // The provider says why, then hangs up instead of ending the stream.
          if (fault.reset) resetAfter = events.length;
        }
        return stream(exchange, res, headers, events, controls, resetAfter);
      }
      if (resetAfter === undefined) return send(exchange, res, 200, answer.body, headers);
      return sendPartial(exchange, res, answer.body, headers, resetAfter);
    } catch (error) {
      if (!(error instanceof ProviderError)) throw error;
      if (apiKey !== undefined && limiter.mode(apiKey) === "none") {
        // A server that sends no figures says at most when to come back, in whole seconds.
        const own = Object.entries(error.headers).filter(([name]) => !WINDOW_FIGURES.test(name));
        return fail(api, exchange, res, error, {}, controls?.rateLimits, Object.fromEntries(own));
      }
      return fail(api, exchange, res, error, limitHeaders(api, apiKey), controls?.rateLimits);
    }
  }

  /**
   * The key's rate-limit headers in the API's names: none before the key is known or under
   * `none`. A test's own (`x-fake-rate-limits`) go on top of these wherever they are sent: those
   * are the test speaking, not the window.
   */
  function limitHeaders(api: ModelApi, apiKey: string | undefined): Record<string, string> {
    if (apiKey === undefined || limiter.mode(apiKey) === "none") return {};
    return api.rateLimitHeaders(limiter.state(apiKey));
  }

  async function stream(
    exchange: Exchange,
    res: ServerResponse,
    headers: Record<string, string>,
    events: readonly string[],
    controls: Controls,
    resetAfter: number | undefined,
  ): Promise<void> {
    exchange.status = 200;
    res.writeHead(200, {
      ...headers,
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
    });
    res.flushHeaders();
    const delayMs = controls.chunkDelayMs ?? options.chunkDelayMs ?? 0;

    // Runs before the first event and right after each write, before its flush is awaited, so a
    // paused state is visible by the time the client can read the event that caused it.
    const holdOrBreak = async (flushed: Promise<void>): Promise<boolean> => {
      if (exchange.chunksSent === resetAfter) {
        await flushed;
        exchange.settle("reset");
        res.destroy();
        return true;
      }
      if (exchange.chunksSent === controls.pauseAfter) await exchange.pause();
      await flushed;
      return exchange.signal.aborted;
    };

    // Breaking before the first event must not take the headers down with it.
    if (await holdOrBreak(resetAfter === 0 ? headersOut() : Promise.resolve())) return;
    for (const event of events) {
      if (delayMs > 0 && exchange.chunksSent > 0) await wait(delayMs, exchange.signal);
      if (exchange.signal.aborted) return;
      // Each event is its own write, flushed before the next, as a real provider's tokens are.
      const flushed = write(res, event, exchange.signal);
      exchange.responseBody += event;
      exchange.chunkSent();
      if (await holdOrBreak(flushed)) return;
    }
    res.end();
  }

  /** `headers` carry the request id, under the name the API gives it. */
  function send(
    exchange: Exchange,
    res: ServerResponse,
    status: number,
    body: string,
    headers: Record<string, string>,
  ): void {
    exchange.status = status;
    exchange.responseBody = body;
    res.writeHead(status, {
      ...headers,
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
    });
    res.end(body);
  }

  function respond(exchange: Exchange, res: ServerResponse, body: unknown): void {
    send(exchange, res, 200, JSON.stringify(body), { [OPENAI_DIALECT.requestIdHeader]: exchange.id });
  }

  function fail(
    dialect: ErrorDialect,
    exchange: Exchange,
    res: ServerResponse,
    error: ProviderError,
    headers: Record<string, string> = {},
    /** Rate-limit headers a test asked for (x-fake-rate-limits): over the error's own retry-after too. */
    asked: Readonly<Record<string, string>> = {},
    /** The error's own headers (retry-after), or what is left of them. */
    own: Readonly<Record<string, string>> = error.headers,
  ): void {
    send(exchange, res, error.status, dialect.errorBody(error, exchange.id), {
      ...headers,
      ...own,
      ...asked,
      [dialect.requestIdHeader]: exchange.id,
    });
  }

  /** Promises the whole body in content-length, sends `bytes` of it, then cuts the connection. */
  async function sendPartial(
    exchange: Exchange,
    res: ServerResponse,
    body: string,
    headers: Record<string, string>,
    bytes: number,
  ): Promise<void> {
    const buffer = Buffer.from(body);
    const part = buffer.subarray(0, Math.min(bytes, buffer.length - 1));
    exchange.status = 200;
    res.writeHead(200, {
      ...headers,
      "content-type": "application/json",
      "content-length": buffer.length,
    });
    if (part.length > 0) {
      await write(res, part, exchange.signal);
    } else {
      res.flushHeaders();
      await headersOut();
    }
    exchange.settle("reset");
    res.destroy();
  }

  const waitForRequest = (
    predicate: (request: FakeRequest) => boolean = () => true,
    timeoutMs = DEFAULT_WAIT_MS,
  ): Promise<FakeRequest> => {
    const found = requests.find(predicate);
    if (found !== undefined) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const waiter = (exchange: Exchange): boolean => {
        let matched: boolean;
        try {
          matched = predicate(exchange);
        } catch (error) {
          clearTimeout(timer);
          reject(error);
          return true;
        }
        if (matched) {
          clearTimeout(timer);
          resolve(exchange);
        }
        return matched;
      };
      const timer = setTimeout(() => {
        waiters.delete(waiter);
        reject(new Error(`no request matched within ${timeoutMs} ms (${requests.length} received)`));
      }, timeoutMs);
      waiters.add(waiter);
    });
  };

  let closed: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closed ??= (async () => {
      closing = true;
      const stopped = new Promise<void>((resolve, reject) => {
        server.close((error) => (error === undefined ? resolve() : reject(error)));
      });
      server.closeAllConnections();
      await stopped;
      // The server can report closed before each response has seen its socket go; wait, so every
      // request's state is final once close() resolves.
      await Promise.all(Array.from(live, (exchange) => exchange.done));
    })();
    return closed;
  };

  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const urlHost = host.includes(":") ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}`,
    port,
    requests,
    waitForRequest,
    resumePaused: () => {
      for (const exchange of live) exchange.resume();
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.once("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.once("error", reject);
  });
}

/** Writes and settles once the bytes reached the socket, or once the response is gone. */
function write(res: ServerResponse, chunk: string | Buffer, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      signal.removeEventListener("abort", done);
      resolve();
    };
    signal.addEventListener("abort", done, { once: true });
    res.write(chunk, done);
  });
}

/**
 * Settles once headers passed to `flushHeaders()` have left: Node corks the socket and sends them
 * on the next tick, with no callback to wait for.
 */
function headersOut(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Sleeps, waking early when the response has ended. */
async function wait(ms: number, signal: AbortSignal): Promise<void> {
  await sleep(ms, undefined, { signal }).catch(() => {});
}
