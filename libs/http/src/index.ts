export { jsonDepthExceeds } from "./depth.js";
export {
  BodyTooLargeError,
  HttpLimitError,
  JsonTooDeepError,
  limitErrorOf,
  TooManyHeadersError,
} from "./errors.js";
export {
  clientErrorAnswer,
  type ErrorAnswer,
  guardListener,
  type HttpLimitsConfig,
  type ListenerOptions,
  listenerOptions,
  listenOn,
} from "./listener.js";
