export {
  ANTHROPIC_HEADERS,
  type Dimension,
  type DimensionHeaders,
  OPENAI_HEADERS,
  parseDuration,
  parseTimestamp,
  type RateLimitHeaderNames,
  type RateLimitReading,
  readRateLimits,
  type WindowReading,
} from "./headers.js";
export { WindowState } from "./window.js";
