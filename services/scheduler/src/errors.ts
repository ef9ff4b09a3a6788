import { BusError, ConcurrencyError } from "@holdfast/bus";
import { DurableRunError, InvalidRunIdError } from "@holdfast/events";
import { GrpcStatus } from "@holdfast/grpc";

/**
 * Errors the durable-run API answers, each with its stable `code`, whether a retry can
 * help, and its HTTP status and gRPC status: the one mapping onto both transports.
 */
export abstract class SchedulerError extends Error {
  abstract readonly code: string;
  abstract readonly retryable: boolean;
  abstract readonly httpStatus: number;
  abstract readonly grpcStatus: GrpcStatus;
}

/** The request names no valid agent, run, input or cap. Nothing was recorded. */
export class InvalidArgumentError extends SchedulerError {
  override readonly name = "InvalidArgumentError";
  readonly code = "invalid_argument";
  readonly retryable = false;
  readonly httpStatus = 400;
  readonly grpcStatus = GrpcStatus.INVALID_ARGUMENT;
}

export class UnauthenticatedError extends SchedulerError {
  override readonly name = "UnauthenticatedError";
  readonly code = "unauthenticated";
  readonly retryable = false;
  readonly httpStatus = 401;
  readonly grpcStatus = GrpcStatus.UNAUTHENTICATED;
}

export class PermissionDeniedError extends SchedulerError {
  override readonly name = "PermissionDeniedError";
  readonly code = "permission_denied";
  readonly retryable = false;
  readonly httpStatus = 403;
  readonly grpcStatus = GrpcStatus.PERMISSION_DENIED;
}

/** No such durable run, or no such agent deployed. */
export class NotFoundError extends SchedulerError {
  override readonly name = "NotFoundError";
  readonly code = "not_found";
  readonly retryable = false;
  readonly httpStatus = 404;
  readonly grpcStatus = GrpcStatus.NOT_FOUND;
}

/** The run is not where the request needs it (a re-drive of a running run, a cancel of a finished one). */
export class FailedPreconditionError extends SchedulerError {
  override readonly name = "FailedPreconditionError";
  readonly code = "failed_precondition";
  readonly retryable = false;
  readonly httpStatus = 409;
  readonly grpcStatus = GrpcStatus.FAILED_PRECONDITION;
}

/**
 * A submission's idempotency key names a run submitted with another input (or partition
 * key): answering with that run would hand the client a run of something it did not ask
 * for. A new run needs a new key.
 */
export class IdempotencyKeyReusedError extends SchedulerError {
  override readonly name = "IdempotencyKeyReusedError";
  readonly code = "idempotency_key_reused";
  readonly retryable = false;
  readonly httpStatus = 409;
  readonly grpcStatus = GrpcStatus.ALREADY_EXISTS;
}

/** Another writer kept changing the run while this was decided; trying again is safe. */
export class ConflictError extends SchedulerError {
  override readonly name = "ConflictError";
  readonly code = "conflict";
  readonly retryable = true;
  readonly httpStatus = 409;
  readonly grpcStatus = GrpcStatus.ABORTED;
}

/** The event log could not take or give what was asked; trying again is safe. */
export class LogUnavailableError extends SchedulerError {
  override readonly name = "LogUnavailableError";
  readonly code = "log_unavailable";
  readonly retryable = true;
  readonly httpStatus = 503;
  readonly grpcStatus = GrpcStatus.UNAVAILABLE;
}

/** The scheduler itself failed (a bug, not the log): the answer says so, not "try again later". */
export class InternalError extends SchedulerError {
  override readonly name = "InternalError";
  readonly code = "internal";
  readonly retryable = false;
  readonly httpStatus = 500;
  readonly grpcStatus = GrpcStatus.INTERNAL;
}

/** Any error as this API answers it. */
export function toSchedulerError(error: unknown): SchedulerError {
  if (error instanceof SchedulerError) return error;
  if (error instanceof InvalidRunIdError) return new InvalidArgumentError(error.message, { cause: error });
  if (error instanceof DurableRunError) {
    if (error.reason === "not_durable")
      return new NotFoundError("no durable run by that id", { cause: error });
    if (error.reason === "idempotency_key_reused")
      return new IdempotencyKeyReusedError(error.message, { cause: error });
    return new FailedPreconditionError(error.message, { cause: error });
  }
  if (error instanceof ConcurrencyError) return new ConflictError(error.message, { cause: error });
  if (error instanceof BusError) return new LogUnavailableError(error.message, { cause: error });
  return new InternalError(`the scheduler failed: ${(error as Error)?.message ?? String(error)}`, {
    cause: error,
  });
}
