import type { IncomingHttpHeaders } from "node:http";
import { Agent, type Dispatcher, errors as undiciErrors } from "undici";

export interface UpstreamOptions {
  /** The provider base URL an SDK would use, e.g. https://api.openai.com/v1. */
  baseUrl: string;
  /** Longest wait for response headers, and longest silence between body chunks. */
  timeoutMs: number;
}

export interface UpstreamRequest {
  /** Path below the base URL, e.g. "/chat/completions". */
  path: string;
  method: string;
  headers: Record<string, string | string[]>;
  body?: Buffer;
  signal: AbortSignal;
}

/** One provider endpoint with a pool of keep-alive connections. */
export class Upstream {
  readonly origin: string;
  private readonly basePath: string;
  private readonly agent: Agent;

  constructor(options: UpstreamOptions) {
    const url = new URL(options.baseUrl);
    this.origin = url.origin;
    this.basePath = url.pathname.replace(/\/+$/, "");
    this.agent = new Agent({
      keepAliveTimeout: 30_000,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
      connect: { timeout: Math.min(options.timeoutMs, 10_000) },
    });
  }

  request(request: UpstreamRequest): Promise<Dispatcher.ResponseData> {
    return this.agent.request({
      origin: this.origin,
      path: `${this.basePath}${request.path}`,
      method: request.method as Dispatcher.HttpMethod,
      headers: request.headers,
      body: request.body ?? null,
      signal: request.signal,
    });
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}

// Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection, not the message.
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

const NOT_FORWARDED = new Set(["host", "content-length", "content-encoding", "accept-encoding", "expect"]);

/**
 * The client's headers as the provider should see them: the credential and every SDK
 * header pass through; connection-level headers, the host, the body length and encoding
 * (the body is forwarded decoded, and may be rewritten), `Expect` (the gateway answered
 * it itself) and Holdfast's own headers do not. Compression is not requested, so the
 * gateway can read the usage it meters.
 */
export function forwardHeaders(incoming: IncomingHttpHeaders, bodyLength: number | undefined) {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(incoming)) {
    if (value === undefined || HOP_BY_HOP.has(name)) continue;
    if (NOT_FORWARDED.has(name)) continue;
    if (name.startsWith("x-holdfast-")) continue;
    out[name] = value;
  }
  if (bodyLength !== undefined) out["content-length"] = String(bodyLength);
  return out;
}

/** The provider's response headers as the client should see them (status and rate limits included). */
export function returnHeaders(incoming: IncomingHttpHeaders, bodyLength: number | undefined) {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(incoming)) {
    if (value === undefined || HOP_BY_HOP.has(name) || name === "content-length") continue;
    out[name] = value;
  }
  if (bodyLength !== undefined) out["content-length"] = String(bodyLength);
  return out;
}

/** True when the error means the provider did not answer in time. */
export function isTimeout(error: unknown): boolean {
  return (
    error instanceof undiciErrors.HeadersTimeoutError ||
    error instanceof undiciErrors.BodyTimeoutError ||
    error instanceof undiciErrors.ConnectTimeoutError
  );
}
