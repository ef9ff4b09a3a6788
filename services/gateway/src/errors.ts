/**
 * Errors the gateway answers itself, before or instead of the provider. Each maps to an
 * HTTP status and the provider's error `type`, in one place: the route's error reply.
 */
export abstract class GatewayError extends Error {
  abstract readonly code: string;
  abstract readonly status: number;
  abstract readonly type: string;
  abstract readonly retryable: boolean;
  readonly param: string | null;

  constructor(message: string, options: { param?: string | null; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.param = options.param ?? null;
  }
}

/** The request is malformed or names a run/tag Holdfast cannot accept. Nothing was forwarded. */
export class InvalidRequestError extends GatewayError {
  override readonly name = "InvalidRequestError";
  readonly code = "invalid_request";
  readonly status = 400;
  readonly type = "invalid_request_error";
  readonly retryable = false;
}

/** The event log cannot record the call, so it is not forwarded: an unrecorded call is unmetered. */
export class LogUnavailableError extends GatewayError {
  override readonly name = "LogUnavailableError";
  readonly code = "holdfast_log_unavailable";
  readonly status = 503;
  readonly type = "server_error";
  readonly retryable = true;
}

/** The upstream could not be reached or did not answer in time. */
export class UpstreamUnreachableError extends GatewayError {
  override readonly name = "UpstreamUnreachableError";
  readonly code = "upstream_unreachable";
  readonly status = 502;
  readonly type = "server_error";
  readonly retryable = true;
}

/** The upstream did not answer (or went silent mid-body) within gateway.upstream_timeout_ms. */
export class UpstreamTimeoutError extends GatewayError {
  override readonly name = "UpstreamTimeoutError";
  readonly code = "upstream_timeout";
  readonly status = 504;
  readonly type = "server_error";
  readonly retryable = true;
}
