export {
  ConcurrencyLimit,
  ConcurrencyLimits,
  type ConcurrencyOptions,
  type Refusal,
} from "./concurrency.js";
export { type DecideInput, type Decision, decide, type Figures } from "./decide.js";
export {
  type Actual,
  type CallFeatures,
  type CostEstimator,
  ESTIMATOR_DEFAULTS,
  type Estimate,
  Estimator,
  type EstimatorOptions,
} from "./estimator.js";
export { FEATURE_NAMES, FeatureEstimator, type FeatureName } from "./features.js";
export {
  ANTHROPIC_HEADERS,
  type Dimension,
  type DimensionHeaders,
  MAX_WINDOW_COUNT,
  MAX_WINDOW_WAIT_MS,
  OPENAI_HEADERS,
  parseDuration,
  parseTimestamp,
  type RateLimitHeaderNames,
  type RateLimitReading,
  readRateLimits,
  type WindowReading,
} from "./headers.js";
export { DIMENSIONS, type DimensionView, KeyWindow, KeyWindows, type Need } from "./keys.js";
export {
  asOfOfRecorded,
  type RecordedReading,
  type RecordedWindow,
  readingOfRecorded,
  shapesOfRecorded,
} from "./observed.js";
export {
  declaredShapes,
  SECOND_RESOLUTION_MS,
  ShapeTracker,
  type ShapeView,
  type WindowShape,
} from "./shape.js";
export {
  type DeclaredLimits,
  declaredLimits,
  type Grant,
  type KeyReport,
  type ReserveOutcome,
  type ReserveRequest,
  type SharedWindowOptions,
  SharedWindows,
  SLICE_MEMORY_MS,
  type SliceRecord,
} from "./shared.js";
export { CHARS_PER_TOKEN, encodingOf, TokenCounter } from "./tokens.js";
export { WindowState } from "./window.js";
