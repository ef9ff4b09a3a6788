import * as grpc from "@grpc/grpc-js";

/** A server-side unary handler written as an async function. */
export type UnaryHandler<Req, Res> = (request: Req, call: grpc.ServerUnaryCall<Req, Res>) => Promise<Res>;

/** What a thrown error answers: a status code and a message (and trailing metadata, if any). */
export type ErrorToStatus = (error: unknown) => Partial<grpc.StatusObject> & { code: grpc.status };

/**
 * Adapts an async function to grpc-js's callback style: its result is the answer, and
 * whatever it throws is answered as `toStatus` says (the service's one mapping of its
 * errors onto gRPC status codes).
 */
export function unary<Req, Res>(
  handler: UnaryHandler<Req, Res>,
  toStatus: ErrorToStatus,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    handler(call.request, call).then(
      (response) => callback(null, response),
      (error: unknown) => {
        const status = toStatus(error);
        callback({
          code: status.code,
          details: status.details ?? (error instanceof Error ? error.message : String(error)),
          metadata: status.metadata ?? new grpc.Metadata(),
        });
      },
    );
  };
}
