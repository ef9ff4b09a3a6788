import { GrpcStatus } from "@holdfast/grpc";

/** Errors of the budget service. `retryable` says whether the same call can succeed later. */
export abstract class BudgetError extends Error {
  abstract readonly code: string;
  abstract readonly retryable: boolean;
  abstract readonly grpcStatus: GrpcStatus;
}

/** The request names no budget, or asks for nothing sensible. */
export class InvalidBudgetRequestError extends BudgetError {
  override readonly name = "InvalidBudgetRequestError";
  readonly code = "HOLDFAST_BUDGET_INVALID_REQUEST";
  readonly retryable = false;
  readonly grpcStatus = GrpcStatus.INVALID_ARGUMENT;
}

/** The service is still folding the period's spend from the log: it cannot grant yet. */
export class BudgetNotReadyError extends BudgetError {
  override readonly name = "BudgetNotReadyError";
  readonly code = "HOLDFAST_BUDGET_NOT_READY";
  readonly retryable = true;
  readonly grpcStatus = GrpcStatus.UNAVAILABLE;
}

/** The one mapping of this service's errors onto gRPC status codes. */
export function budgetStatus(error: unknown): { code: GrpcStatus; details: string } {
  if (error instanceof BudgetError) return { code: error.grpcStatus, details: error.message };
  return { code: GrpcStatus.INTERNAL, details: "the budget service failed while answering" };
}
