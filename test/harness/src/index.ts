export { NATS_URL_KEY } from "./context.js";
export {
  HarnessError,
  type HarnessErrorCode,
  NatsUrlUnavailableError,
  WaitForTimeoutError,
} from "./errors.js";
export { uniqueNamespace } from "./namespace.js";
export { type LaunchNatsServerOptions, launchNatsServer, natsUrl } from "./nats.js";
export { freePort } from "./port.js";
export { makeTempDir, type TempDir } from "./temp.js";
export { type WaitForOptions, waitFor } from "./wait.js";
