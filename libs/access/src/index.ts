export {
  type Access,
  AccessDeniedError,
  AccessPolicy,
  bindingProblem,
  type ControlAccessConfig,
  isLoopback,
  listenerProblem,
  ServiceToken,
} from "./tokens.js";
