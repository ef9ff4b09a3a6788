import { maxHeaderSize, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { FastifyInstance } from "fastify";
import { jsonDepthExceeds } from "./depth.js";
import { JsonTooDeepError, TooManyHeadersError } from "./errors.js";

/** The `http` section of the configuration: what every listener holds its clients to. */
export interface HttpLimitsConfig {
  readonly header_timeout_ms: number;
  readonly request_timeout_ms: number;
  readonly idle_timeout_ms: number;
  readonly max_headers: number;
  readonly max_json_depth: number;
}

/** An error a listener answers, before it is written in the API's own shape. */
export interface ErrorAnswer {
  readonly status: number;
  readonly code: string;
  readonly message: string;
}

export interface ListenerOptions {
  /** The largest request body this listener takes, in bytes. */
  bodyLimit: number;
  /**
   * The JSON body of an error for a request Node's HTTP parser refused (its headers or
   * body not received in time, its header bytes too large, bytes that are not HTTP), in
   * the API's own shape; `path` is the request's target, "/" when it was not read.
   */
  errorBody: (answer: ErrorAnswer, path: string) => unknown;
}

/**
 * fastify's server options for a listener held to `limits`: the time a client has to send
 * its headers and its whole request (a slow or stalled client is answered 408 and cut
 * off), and to keep an idle connection. Only receiving is timed: Node's request timeout
 * stops once the request is in, so a held call or a long stream is answered for as long as
 * it takes, and no socket idle timeout is set for the same reason.
 */
export function listenerOptions(limits: HttpLimitsConfig, options: ListenerOptions) {
  return {
    bodyLimit: options.bodyLimit,
    requestTimeout: limits.request_timeout_ms,
    keepAliveTimeout: limits.idle_timeout_ms,
    connectionTimeout: 0,
    http: {
      headersTimeout: limits.header_timeout_ms,
      // Node looks for expired requests this often (30 s by default): a timeout is kept to
      // within a quarter of itself, and never looked for more than once every 50 ms.
      connectionsCheckingInterval: Math.max(
        50,
        Math.min(1_000, Math.floor(Math.min(limits.header_timeout_ms, limits.request_timeout_ms) / 4)),
      ),
    },
    clientErrorHandler: clientErrorHandler(limits, options.errorBody),
  };
}

/**
 * What `listenerOptions` cannot set, on the built app: more header fields than
 * http.max_headers is a TooManyHeadersError (431) rather than the rest dropped unread, as
 * Node would past its own count; and, with `json`, a JSON body nested deeper than
 * http.max_json_depth is a JsonTooDeepError (400). (The gateway, which parses its bodies
 * itself, checks their depth with jsonDepthExceeds.) Each API answers both in its shape.
 */
export function guardListener(
  app: FastifyInstance,
  limits: HttpLimitsConfig,
  options: { json: boolean },
): void {
  // One more than allowed is kept, so a request with too many is seen to have them.
  app.server.maxHeadersCount = limits.max_headers + 1;
  // A callback, not a promise: this runs on every request, the gateway's model calls included.
  app.addHook("onRequest", (request, _reply, done) => {
    if (request.raw.rawHeaders.length > limits.max_headers * 2)
      return done(new TooManyHeadersError(limits.max_headers));
    done();
  });
  // A request answered before its body is all in (refused for its token, its size) closes
  // its connection: else the rest of the body is waited for, and a request timeout would
  // answer the same request a second time.
  app.addHook("onSend", (request, reply, payload, done) => {
    if (request.raw.complete === false) reply.header("connection", "close");
    done(null, payload);
  });
  if (!options.json) return;
  const parse = app.getDefaultJsonParser("error", "error");
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (request, body, done) => {
    parse(request, body as string, (error, value) => {
      if (error) return done(error, undefined);
      if (jsonDepthExceeds(value, limits.max_json_depth)) {
        return done(new JsonTooDeepError(limits.max_json_depth), undefined);
      }
      done(null, value);
    });
  });
}

type ClientError = Error & { code?: string };

/**
 * Answers a request Node's parser refused, in the API's shape, and closes the connection.
 * Nothing is written once a response has started on it: its bytes would corrupt it.
 */
function clientErrorHandler(limits: HttpLimitsConfig, errorBody: ListenerOptions["errorBody"]) {
  return (error: ClientError, socket: Socket): void => {
    if (error.code === "ECONNRESET" || socket.destroyed) return;
    // Node's own handler looks here too: the response to the request being read, if any.
    const response = (socket as { _httpMessage?: ServerResponse | null })._httpMessage ?? undefined;
    if (socket.writable && response?.headersSent !== true) {
      const answer = clientErrorAnswer(error, limits);
      // The request line, when the parser got that far, says which API the client speaks.
      const packet = (error as { rawPacket?: unknown }).rawPacket;
      const line = Buffer.isBuffer(packet) ? packet.toString("latin1") : "";
      const path = /^[A-Z]+ (\S+)/.exec(line)?.[1] ?? response?.req?.url ?? "/";
      socket.write(rawResponse(answer, errorBody(answer, path)));
    }
    socket.destroy();
  };
}

/** What a request Node's parser refused is answered, whatever the API. */
export function clientErrorAnswer(error: ClientError, limits: HttpLimitsConfig): ErrorAnswer {
  switch (error.code) {
    case "HPE_HEADER_OVERFLOW":
      return {
        status: 431,
        code: "headers_too_large",
        message: `The request headers are larger than ${maxHeaderSize} bytes, the most this server reads.`,
      };
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return {
        status: 408,
        code: "request_timeout",
        message: `The request was not received in time: its headers must arrive within ${limits.header_timeout_ms} ms (http.header_timeout_ms) and the whole request within ${limits.request_timeout_ms} ms (http.request_timeout_ms).`,
      };
    default:
      return {
        status: 400,
        code: "invalid_http",
        message: `The request is not valid HTTP: ${error.message}.`,
      };
  }
}

const REASONS: Record<number, string> = {
  400: "Bad Request",
  408: "Request Timeout",
  431: "Request Header Fields Too Large",
};

function rawResponse(answer: ErrorAnswer, body: unknown): string {
  const text = JSON.stringify(body);
  return (
    `HTTP/1.1 ${answer.status} ${REASONS[answer.status] ?? "Error"}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`
  );
}

/**
 * Listens on `port` (0 picks a free one); with `freePortIfTaken`, a port another process
 * holds is replaced by a free one instead of failing, so two stacks started at once on one
 * machine both come up (the caller reports the port it got). Answers the port listened on.
 */
export async function listenOn(
  app: { listen(options: { host: string; port: number }): Promise<string>; server: { address(): unknown } },
  options: { host: string; port: number; freePortIfTaken: boolean },
): Promise<number> {
  try {
    await app.listen({ host: options.host, port: options.port });
  } catch (error) {
    if (!options.freePortIfTaken || (error as NodeJS.ErrnoException).code !== "EADDRINUSE") throw error;
    await app.listen({ host: options.host, port: 0 });
  }
  const address = app.server.address() as { port: number } | string | null;
  return typeof address === "object" && address !== null ? address.port : options.port;
}
