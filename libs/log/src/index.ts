export type { DestinationStream, Logger } from "pino";
export { type CreateLoggerOptions, createLogger, type LogLevel } from "./logger.js";
export { CENSOR } from "./scrub.js";
