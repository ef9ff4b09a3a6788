export type { Deployment } from "./agents/registry.js";
export { CapBook, type CapKey, parseRateLimit } from "./queue/caps.js";
export { type RunningScheduler, startScheduler } from "./service.js";
