export {
  type Access,
  AccessDeniedError,
  AccessPolicy,
  bindingProblem,
  type ControlAccessConfig,
  isLoopback,
} from "./tokens.js";
