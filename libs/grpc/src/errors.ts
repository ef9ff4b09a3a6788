/** Errors of the gRPC plumbing. `retryable` says whether trying again can help. */
export abstract class GrpcError extends Error {
  abstract readonly code: string;
  abstract readonly retryable: boolean;
}

/** The server could not listen where it was asked to (port in use, no such interface). */
export class GrpcBindError extends GrpcError {
  override readonly name = "GrpcBindError";
  readonly code = "HOLDFAST_GRPC_BIND";
  readonly retryable = false;
}
