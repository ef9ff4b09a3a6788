import { BusError, ConcurrencyError } from "@holdfast/bus";
import { InvalidRunIdError, NothingGatedError, RunGatedError } from "@holdfast/events";
import { GrpcStatus } from "@holdfast/grpc";

/**
 * Errors the control API answers. Each carries its stable `code`, whether a retry can
 * help, and the HTTP status and gRPC status code it is answered with: the one mapping of
 * the service's errors onto both transports.
 */
export abstract class ControlError extends Error {
  abstract readonly code: string;
  abstract readonly retryable: boolean;
  abstract readonly httpStatus: number;
  abstract readonly grpcStatus: GrpcStatus;
}

/** The request names no valid run, selector, limit or field. Nothing was recorded. */
export class InvalidArgumentError extends ControlError {
  override readonly name = "InvalidArgumentError";
  readonly code = "invalid_argument";
  readonly retryable = false;
  readonly httpStatus = 400;
  readonly grpcStatus = GrpcStatus.INVALID_ARGUMENT;
}

/** No token, or not a token this service knows. */
export class UnauthenticatedError extends ControlError {
  override readonly name = "UnauthenticatedError";
  readonly code = "unauthenticated";
  readonly retryable = false;
  readonly httpStatus = 401;
  readonly grpcStatus = GrpcStatus.UNAUTHENTICATED;
}

/** A valid token that may not do this: the read-only token asking for a change. */
export class PermissionDeniedError extends ControlError {
  override readonly name = "PermissionDeniedError";
  readonly code = "permission_denied";
  readonly retryable = false;
  readonly httpStatus = 403;
  readonly grpcStatus = GrpcStatus.PERMISSION_DENIED;
}

/** No such run (it has no events) or no such rule in force. */
export class NotFoundError extends ControlError {
  override readonly name = "NotFoundError";
  readonly code = "not_found";
  readonly retryable = false;
  readonly httpStatus = 404;
  readonly grpcStatus = GrpcStatus.NOT_FOUND;
}

/** Another writer kept changing the run while this action was decided; trying again is safe. */
export class ConflictError extends ControlError {
  override readonly name = "ConflictError";
  readonly code = "conflict";
  readonly retryable = true;
  readonly httpStatus = 409;
  readonly grpcStatus = GrpcStatus.ABORTED;
}

/** The event log (NATS) could not take or give what was asked; trying again is safe. */
export class LogUnavailableError extends ControlError {
  override readonly name = "LogUnavailableError";
  readonly code = "log_unavailable";
  readonly retryable = true;
  readonly httpStatus = 503;
  readonly grpcStatus = GrpcStatus.UNAVAILABLE;
}

/** The projector's analytics API (runs as the projection has them) could not answer. */
export class AnalyticsUnavailableError extends ControlError {
  override readonly name = "AnalyticsUnavailableError";
  readonly code = "analytics_unavailable";
  readonly retryable = true;
  readonly httpStatus = 503;
  readonly grpcStatus = GrpcStatus.UNAVAILABLE;
}

/**
 * The run is not in a state the action applies to: an approval or denial for a run with no
 * answer held by the tool-call gate, or a resume of a run whose answer it holds.
 */
export class FailedPreconditionError extends ControlError {
  override readonly name = "FailedPreconditionError";
  readonly code = "failed_precondition";
  readonly retryable = false;
  readonly httpStatus = 409;
  readonly grpcStatus = GrpcStatus.FAILED_PRECONDITION;
}

/** The control service itself failed. */
export class InternalError extends ControlError {
  override readonly name = "InternalError";
  readonly code = "internal";
  readonly retryable = true;
  readonly httpStatus = 500;
  readonly grpcStatus = GrpcStatus.INTERNAL;
}

/**
 * The control API would listen where anyone could change runs: off loopback without a
 * token, and not allowed by control.insecure. The service does not start.
 */
export class InsecureBindError extends Error {
  override readonly name = "InsecureBindError";
  readonly code = "HOLDFAST_CONTROL_INSECURE_BIND";
  readonly retryable = false;
}

/** Any error as the control API answers it: its own, or another package's, translated. */
export function asControlError(error: unknown): ControlError {
  if (error instanceof ControlError) return error;
  if (error instanceof InvalidRunIdError) return new InvalidArgumentError(error.message, { cause: error });
  if (error instanceof NothingGatedError && error.gateId !== undefined) {
    return new NotFoundError(error.message, { cause: error });
  }
  if (error instanceof NothingGatedError || error instanceof RunGatedError) {
    return new FailedPreconditionError(error.message, { cause: error });
  }
  if (error instanceof ConcurrencyError) {
    return new ConflictError(
      `${error.message}; the action changed nothing it had not already done: try again`,
      {
        cause: error,
      },
    );
  }
  if (error instanceof BusError) {
    return error.retryable
      ? new LogUnavailableError(`the event log is unreachable: ${error.message}`, { cause: error })
      : new InternalError(`the event log refused the action: ${error.message}`, { cause: error });
  }
  return new InternalError(error instanceof Error ? error.message : String(error), { cause: error });
}

/** The JSON body of a REST error: `{"error": {"code", "message"}}`. */
export function errorBody(error: ControlError): { error: { code: string; message: string } } {
  return { error: { code: error.code, message: error.message } };
}
