export { type ConfigKeyDescription, describeConfig } from "./describe.js";
export { ConfigError, type ConfigIssue } from "./errors.js";
export { type LoadConfigOptions, loadConfig, natsConnection } from "./load.js";
export { redactConfig } from "./redact.js";
export { type Config, configSchema, type DeepPartial, GATE_REGEX_FLAGS, LOG_LEVELS } from "./schema.js";
