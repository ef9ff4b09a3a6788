/**
 * A request refused for going past one of a listener's limits. Each API answers it in its
 * own error shape with this `status` and `code`; retrying the same request cannot help.
 */
export abstract class HttpLimitError extends Error {
  abstract readonly code: string;
  abstract readonly status: number;
  readonly retryable = false;
}

/** More header fields than http.max_headers: refused rather than read in part. */
export class TooManyHeadersError extends HttpLimitError {
  override readonly name = "TooManyHeadersError";
  readonly code = "too_many_headers";
  readonly status = 431;
  constructor(readonly max: number) {
    super(
      `The request has more than ${max} header fields, the most this server reads (http.max_headers); send fewer.`,
    );
  }
}

/** A JSON body nested deeper than http.max_json_depth. */
export class JsonTooDeepError extends HttpLimitError {
  override readonly name = "JsonTooDeepError";
  readonly code = "json_too_deep";
  readonly status = 400;
  constructor(readonly max: number) {
    super(
      `The JSON body nests objects and arrays more than ${max} levels deep, the most this server reads (http.max_json_depth).`,
    );
  }
}

/** A body larger than the listener takes. */
export class BodyTooLargeError extends HttpLimitError {
  override readonly name = "BodyTooLargeError";
  readonly code = "request_too_large";
  readonly status = 413;
  constructor(
    readonly max: number,
    /** The setting that holds the limit, when there is one. */
    setting?: string,
  ) {
    super(
      `The request body is larger than ${max} bytes, the most this server accepts${setting === undefined ? "" : ` (${setting})`}.`,
    );
  }
}

/**
 * The limit a request went past, as one of ours: our own errors as they are, fastify's
 * refusal of an oversized body as a BodyTooLargeError naming `bodyLimit`; undefined for
 * any other error.
 */
export function limitErrorOf(
  error: unknown,
  bodyLimit: number,
  setting?: string,
): HttpLimitError | undefined {
  if (error instanceof HttpLimitError) return error;
  if ((error as { code?: unknown } | null)?.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    return new BodyTooLargeError(bodyLimit, setting);
  }
  return undefined;
}

/** A metric declared wrong (a name Prometheus refuses, a label with no values, too many series): a bug, found at startup. */
export class InvalidMetricError extends Error {
  override readonly name = "InvalidMetricError";
  readonly code = "invalid_metric";
  readonly retryable = false;
}
