export {
  type CallOptions,
  Metadata,
  type ServerUnaryCall,
  type ServiceError,
  type StatusObject,
  status as GrpcStatus,
} from "@grpc/grpc-js";
export {
  type ClientConstructor,
  type ConnectOptions,
  connect,
  DEFAULT_RETRY,
  deadlineInterceptor,
  metadataInterceptor,
  type RetryPolicy,
  retryInterceptor,
} from "./connect.js";
export { GrpcBindError, GrpcError } from "./errors.js";
export { checkHealth, listServices } from "./inspect.js";
export {
  type GrpcServer,
  type Refusal,
  SERVER_BOUNDS,
  type ServedService,
  type ServeOptions,
  type ServerBounds,
  serve,
  serviceName,
} from "./serve.js";
export { type ErrorToStatus, type UnaryHandler, unary } from "./unary.js";
