export { buildApp, type GatewayAppDeps } from "./app.js";
export { type RunningGateway, startGateway } from "./service.js";
