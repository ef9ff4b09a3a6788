export { type Access, AccessPolicy, bindingProblem, isLoopback } from "./access/tokens.js";
export {
  AnalyticsUnavailableError,
  ConflictError,
  ControlError,
  InsecureBindError,
  InternalError,
  InvalidArgumentError,
  LogUnavailableError,
  NotFoundError,
  PermissionDeniedError,
  UnauthenticatedError,
} from "./errors.js";
export { controlGrpcService } from "./grpc/service.js";
export { API_PREFIX, buildApp, type ControlAppDeps } from "./http/app.js";
export {
  type AffectedRun,
  ControlOperations,
  type ControlOperationsDeps,
  type HoldResult,
  type ResumeResult,
  type RuleView,
  type StopResult,
} from "./runs/operations.js";
export { LogRuns, type ProjectedRun, Projection } from "./runs/sources.js";
export { type ActionRequest, limitsFrom, ruleIdFor, type Target } from "./runs/target.js";
export { type RunningControl, startControl } from "./service.js";
