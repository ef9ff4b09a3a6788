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
  /** Response headers the error is answered with (a 429's retry-after). */
  readonly headers: Readonly<Record<string, string>>;

  constructor(
    message: string,
    options: { param?: string | null; cause?: unknown; headers?: Record<string, string> } = {},
  ) {
    super(message, { cause: options.cause });
    this.param = options.param ?? null;
    this.headers = options.headers ?? {};
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

/**
 * With `tenants` configured, a /v1/* call must carry its tenant's gateway key
 * (X-Holdfast-Key): this one carried none. Nothing was forwarded or recorded. A 401, which
 * the SDKs raise at once (AuthenticationError) without retrying.
 */
export class HoldfastKeyRequiredError extends GatewayError {
  override readonly name = "HoldfastKeyRequiredError";
  readonly code = "holdfast_key_required";
  readonly status = 401;
  readonly type = "authentication_error";
  readonly retryable = false;
  constructor() {
    super(
      "This Holdfast gateway serves tenants: send your tenant's Holdfast key in the X-Holdfast-Key header, beside your provider's key. Nothing was sent to the provider.",
    );
  }
}

/**
 * A call that says it comes from a recorded step (X-Holdfast-Origin: replay, fork,
 * compare) without the control token, or with a wrong one: such a call is never held,
 * gated or budgeted, so only an operator may make one. Nothing was forwarded or recorded.
 */
export class OriginNotAuthorizedError extends GatewayError {
  override readonly name = "OriginNotAuthorizedError";
  readonly code = "origin_not_authorized";
  readonly status = 401;
  readonly type = "authentication_error";
  readonly retryable = false;
  constructor(why: string) {
    super(
      `A call sent again from a recorded step (X-Holdfast-Origin) needs the control token in X-Holdfast-Control-Token: ${why}. Nothing was sent to the provider.`,
    );
  }
}

/** The call's X-Holdfast-Key is no tenant's (`tenants.<tenant>.keys_sha256`). Nothing was forwarded or recorded. */
export class HoldfastKeyUnknownError extends GatewayError {
  override readonly name = "HoldfastKeyUnknownError";
  readonly code = "holdfast_key_unknown";
  readonly status = 401;
  readonly type = "authentication_error";
  readonly retryable = false;
  constructor() {
    // The key itself is never echoed: an error message may be logged or shown.
    super(
      "The X-Holdfast-Key this call carries is not a key this Holdfast gateway knows. Nothing was sent to the provider.",
    );
  }
}

/**
 * A field of the request that would go into the call's events is longer than Holdfast
 * records (the model's name past EVENT_BOUNDS.modelChars): refused before anything is
 * recorded or forwarded, since no retry makes it shorter.
 */
export class FieldTooLongError extends GatewayError {
  override readonly name = "FieldTooLongError";
  readonly code = "field_too_long";
  readonly status = 400;
  readonly type = "invalid_request_error";
  readonly retryable = false;
  constructor(field: string, length: number, max: number) {
    super(
      `The request's ${field} is ${length} characters long; Holdfast accepts at most ${max}. Nothing was sent to the provider.`,
      { param: field },
    );
  }
}

/**
 * The provider's answer went past gateway.max_answer_bytes (or an event of its stream past
 * gateway.max_event_bytes): it was cut off there and not delivered. Asking again would most
 * likely be answered the same way, and charged again, so the SDKs are told not to retry.
 */
export class UpstreamAnswerTooLargeError extends GatewayError {
  override readonly name = "UpstreamAnswerTooLargeError";
  readonly code = "upstream_answer_too_large";
  readonly status = 502;
  readonly type = "server_error";
  readonly retryable = false;
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { ...options, headers: { "x-should-retry": "false" } });
  }
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

/**
 * The run is stopped: every call gets a 409 until an operator resumes it. OpenAI's and
 * Anthropic's SDKs raise it as a ConflictError; `x-should-retry: false` keeps them from
 * retrying it first (they retry a 409 twice by default), which would only be refused again.
 */
export class RunStoppedGatewayError extends GatewayError {
  override readonly name = "RunStoppedGatewayError";
  readonly code = "run_stopped";
  readonly status = 409;
  readonly type = "suspended";
  readonly retryable = false;
  constructor(runId: string) {
    super(
      `Holdfast stopped run ${JSON.stringify(runId)}: this call was not sent to the provider. An operator can resume it (holdfast resume).`,
      { headers: { "x-should-retry": "false" } },
    );
  }
}

/**
 * With `gateway.passthrough: deny_models`, a call on a path that makes the provider run a
 * model without Holdfast metering it (legacy completions, embeddings, batches, images,
 * audio, …): refused before its body is read; nothing was sent. A 403, which the SDKs raise
 * at once (PermissionDeniedError) without retrying.
 */
export class PassthroughDeniedError extends GatewayError {
  override readonly name = "PassthroughDeniedError";
  readonly code = "holdfast_unmetered_model_path";
  readonly status = 403;
  readonly type = "permission_error";
  readonly retryable = false;
  constructor(method: string, path: string) {
    super(
      `Holdfast does not pass ${method} ${path} through: it makes the provider run a model that Holdfast cannot meter, and this gateway refuses such calls (gateway.passthrough: deny_models). Nothing was sent to the provider. The metered routes are POST /v1/chat/completions, /v1/responses and /v1/messages.`,
    );
  }
}

/** Holdfast itself failed while handling the call. */
export class InternalGatewayError extends GatewayError {
  override readonly name = "InternalGatewayError";
  readonly code = "holdfast_error";
  readonly status = 500;
  readonly type = "server_error";
  readonly retryable = true;
}

/** This gateway is shutting down; the call was not sent: retry (on another gateway, or in a moment). */
export class ShuttingDownError extends GatewayError {
  override readonly name = "ShuttingDownError";
  readonly code = "holdfast_shutting_down";
  readonly status = 503;
  readonly type = "server_error";
  readonly retryable = true;
  constructor() {
    super("This Holdfast gateway is shutting down; retry on another or in a moment.");
  }
}

/** The budget service could not be reached to cover a call of a budgeted run: not sent; retry. */
export class BudgetUnavailableError extends GatewayError {
  override readonly name = "BudgetUnavailableError";
  readonly code = "holdfast_budget_unavailable";
  readonly status = 503;
  readonly type = "server_error";
  readonly retryable = true;
}

/**
 * An operator denied the answer the tool-call gate held: the agent gets this instead. A
 * 403, which the OpenAI and Anthropic SDKs raise at once (PermissionDeniedError) without
 * retrying: asking the model again would cost another answer that the gate would hold too.
 */
export class ToolCallDeniedError extends GatewayError {
  override readonly name = "ToolCallDeniedError";
  readonly code = "tool_call_denied";
  readonly status = 403;
  readonly type = "tool_call_denied";
  readonly retryable = false;
}

/**
 * An answer the tool-call gate must hold could not be recorded as held (the event log is
 * unreachable), so it is not delivered: an operator could not see it to approve it.
 */
export class GateUnavailableError extends GatewayError {
  override readonly name = "GateUnavailableError";
  readonly code = "holdfast_gate_unavailable";
  readonly status = 503;
  readonly type = "server_error";
  readonly retryable = true;
}

/**
 * A call waited its ceiling (predict.max_wait_s) for its provider key's window: it gets
 * the provider's own answer, a 429 with retry-after, which its SDK knows how to wait out.
 */
export class RateLimitWaitExceededError extends GatewayError {
  override readonly name = "RateLimitWaitExceededError";
  readonly code = "rate_limit_exceeded";
  readonly status = 429;
  readonly type = "rate_limit_error";
  readonly retryable = true;
  constructor(message: string, retryAfterMs: number) {
    super(message, {
      headers: {
        "retry-after": String(Math.max(1, Math.ceil(retryAfterMs / 1_000))),
        "retry-after-ms": String(Math.max(0, Math.ceil(retryAfterMs))),
      },
    });
  }
}

/**
 * A held run's call found no room to park: its run already has `hold.max_parked_per_run`
 * calls parked on this gateway, or the gateway `hold.max_parked` in all. Refused at once
 * rather than holding one more connection for as long as the run is held; nothing was
 * sent, recorded or charged (the refusal is counted). A 429 with retry-after, which the
 * SDKs wait out and retry, by which time the run may have been resumed.
 */
export class ParkingFullError extends GatewayError {
  override readonly name = "ParkingFullError";
  readonly code = "holdfast_too_many_parked";
  readonly status = 429;
  readonly type = "rate_limit_error";
  readonly retryable = true;
  constructor(runId: string, bound: "per_run" | "per_gateway" | "bytes", limit: number) {
    super(
      bound === "per_run"
        ? `Holdfast is holding run ${JSON.stringify(runId)} and already keeps ${limit} of its calls waiting on this gateway (hold.max_parked_per_run): this call was not parked, sent or recorded. Retry later; the run stays held until an operator resumes it.`
        : bound === "per_gateway"
          ? `This Holdfast gateway already keeps ${limit} calls of held runs waiting (hold.max_parked), and run ${JSON.stringify(runId)} is held: this call was not parked, sent or recorded. Retry later, or on another gateway.`
          : `The calls of held runs this Holdfast gateway keeps waiting already hold nearly ${limit} bytes of request bodies (hold.max_parked_bytes), and run ${JSON.stringify(runId)} is held: this call was not parked, sent or recorded. Retry later, or on another gateway.`,
      { headers: { "retry-after": String(PARKING_FULL_RETRY_AFTER_S) } },
    );
  }
}

/** How long a call refused for want of parking room is told to wait before it tries again. */
export const PARKING_FULL_RETRY_AFTER_S = 30;

/**
 * The model has no known price, a cost limit or budget applies to the run, and
 * pricing.unknown is refuse: nothing was forwarded. A 400, which the SDKs raise at once
 * without retrying.
 */
export class UnpricedModelError extends GatewayError {
  override readonly name = "UnpricedModelError";
  readonly code = "model_unpriced";
  readonly status = 400;
  readonly type = "invalid_request_error";
  readonly retryable = false;
  constructor(model: string) {
    super(
      `Holdfast has no price for the model ${JSON.stringify(model)}, and this run is under a cost limit or budget: with pricing.unknown: refuse, such calls are not sent. Give the model a price (prices.<model>), or set pricing.unknown: charge to charge it at pricing.unknown_usd_per_mtok.`,
      { param: "model" },
    );
  }
}

/**
 * A call needs more of its key's window (tokens, or its input alone) than the whole window
 * holds: no wait can help, so it is refused at once rather than parked for ever.
 */
export class TooLargeForRateLimitError extends GatewayError {
  override readonly name = "TooLargeForRateLimitError";
  readonly code = "request_too_large_for_rate_limit";
  readonly status = 400;
  readonly type = "invalid_request_error";
  readonly retryable = false;
}
