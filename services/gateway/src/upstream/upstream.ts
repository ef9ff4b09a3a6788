import type { IncomingHttpHeaders } from "node:http";
import {
  type ApiShape,
  type ProviderFamily,
  providerFromUpstream,
  type ShapeName,
} from "@holdfast/providers";
import { Agent, type Dispatcher, errors as undiciErrors } from "undici";

export interface UpstreamOptions {
  /** The provider base URL an SDK would use, e.g. https://api.openai.com/v1. */
  baseUrl: string;
  /** Longest wait for response headers, and longest silence between body chunks. */
  timeoutMs: number;
  /** Most connections to the origin (0: no limit). */
  connections?: number;
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
  /** The price catalog's provider for this host (undefined for self-hosted ones). */
  readonly provider: string | undefined;
  private readonly basePath: string;
  private readonly agent: Agent;

  constructor(options: UpstreamOptions) {
    const url = new URL(options.baseUrl);
    this.origin = url.origin;
    this.provider = providerFromUpstream(options.baseUrl);
    this.basePath = url.pathname.replace(/\/+$/, "");
    this.agent = new Agent({
      ...(options.connections ? { connections: options.connections } : {}),
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

// What carries a client's credential: a route target with its own key replaces them.
const CREDENTIAL_HEADERS = ["authorization", "x-api-key", "api-key", "x-goog-api-key"];

/** Forwarded headers with the client's credential replaced by `credential` (a route target's own key), when given. */
export function withCredential(
  headers: Record<string, string | string[]>,
  credential: Readonly<Record<string, string>> | undefined,
): Record<string, string | string[]> {
  if (credential === undefined) return headers;
  for (const name of CREDENTIAL_HEADERS) delete headers[name];
  return Object.assign(headers, credential);
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

const AUTO: Record<ProviderFamily, string> = {
  openai: "https://api.openai.com/v1",
  anthropic: "https://api.anthropic.com/v1",
};

export interface UpstreamsConfig {
  /** "auto", or one base URL for every shape. */
  upstream: string;
  /** A base URL per shape, overriding `upstream`. */
  byShape: Partial<Record<ShapeName, string | undefined>>;
  timeoutMs: number;
  /** Most connections to one origin (0: no limit). */
  connections?: number;
}

/**
 * Where each call goes: a base URL per API shape (configured, or by `auto`: Anthropic
 * Messages to Anthropic, the rest to OpenAI), one connection pool per origin.
 */
export class Upstreams {
  private readonly pools = new Map<string, Upstream>();
  private readonly byShape = new Map<ShapeName, Upstream>();
  private readonly byFamily: Record<ProviderFamily, Upstream>;

  constructor(private readonly config: UpstreamsConfig) {
    this.byFamily = {
      openai: this.pool(config.upstream === "auto" ? AUTO.openai : config.upstream),
      anthropic: this.pool(config.upstream === "auto" ? AUTO.anthropic : config.upstream),
    };
  }

  /** The upstream for calls of one shape. */
  forShape(shape: ApiShape): Upstream {
    let upstream = this.byShape.get(shape.name);
    if (upstream === undefined) {
      const url = this.config.byShape[shape.name];
      upstream = url === undefined ? this.byFamily[shape.family] : this.pool(url);
      this.byShape.set(shape.name, upstream);
    }
    return upstream;
  }

  /**
   * The upstream for a path Holdfast does not meter (models, files, count_tokens, …):
   * Anthropic's when the request speaks Anthropic (its path or its headers), else OpenAI's.
   */
  forPassthrough(path: string, headers: IncomingHttpHeaders): Upstream {
    const anthropic =
      path.startsWith("/v1/messages") ||
      (headers["anthropic-version"] !== undefined && headers["x-api-key"] !== undefined);
    return this.forFamily(anthropic ? "anthropic" : "openai");
  }

  private forFamily(family: ProviderFamily): Upstream {
    const shape = family === "anthropic" ? "anthropic_messages" : "openai_chat_completions";
    const url = this.config.byShape[shape];
    return url === undefined ? this.byFamily[family] : this.pool(url);
  }

  async close(): Promise<void> {
    await Promise.all([...this.pools.values()].map((upstream) => upstream.close()));
  }

  /** The upstream at a base URL (a route target's), its connection pool shared with every call there. */
  at(baseUrl: string): Upstream {
    return this.pool(baseUrl);
  }

  private pool(baseUrl: string): Upstream {
    let upstream = this.pools.get(baseUrl);
    if (upstream === undefined) {
      upstream = new Upstream({
        baseUrl,
        timeoutMs: this.config.timeoutMs,
        connections: this.config.connections,
      });
      this.pools.set(baseUrl, upstream);
    }
    return upstream;
  }
}
