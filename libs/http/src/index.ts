export { jsonDepthExceeds } from "./depth.js";
export {
  BodyTooLargeError,
  HttpLimitError,
  InvalidMetricError,
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
export {
  counter,
  gauge,
  MAX_SERIES_PER_FAMILY,
  METRICS_CONTENT_TYPE,
  type MetricFamily,
  type MetricSpec,
  renderMetrics,
} from "./metrics.js";
export { HOLDFAST_SERVICES, type HoldfastService, logReaderMetrics } from "./service-metrics.js";
