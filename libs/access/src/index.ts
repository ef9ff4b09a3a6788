export {
  type Access,
  AccessDeniedError,
  AccessPolicy,
  ANALYTICS_API,
  bindingProblem,
  type ControlAccessConfig,
  type GuardedListener,
  isLoopback,
  listenerProblem,
  ServiceToken,
} from "./tokens.js";
