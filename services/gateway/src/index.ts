export { buildApp, type GatewayAppDeps } from "./app.js";
export { GatewayError } from "./errors.js";
export {
  type AfterOutcome,
  type Amendment,
  type BeforeDeliver,
  type BeforeForward,
  type Call,
  type Cancellation,
  CONTINUE,
  type GatewayFeature,
  PipelineHooks,
  type Verdict,
} from "./pipeline/hooks.js";
export { type GatewayOptions, type RunningGateway, startGateway } from "./service.js";
