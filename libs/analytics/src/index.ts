export { type Analytics, type ClickHouseOptions, openAnalytics, SAME_ANSWERS } from "./client.js";
export {
  AnalyticsError,
  AnalyticsUnavailableError,
  MigrationError,
  ProjectionMismatchError,
  QueryError,
  QueryLimitError,
} from "./errors.js";
export { loadMigrations, type Migration, migrate, splitStatements } from "./migrate.js";
export { listRuns, RUN_STATUSES, type RunRow, runSql, type SqlResult } from "./queries.js";
export { DEFAULT_LIMITS, type JsonAnswer, type QueryLimits, type Reader } from "./reader.js";
export { assertReadStatement, canonicalStatement } from "./statement.js";
export {
  bindProjection,
  type CheckpointKey,
  insertQuarantined,
  insertRows,
  nanoUsdToDecimal,
  type ProjectedTable,
  type ProjectionSource,
  type QuarantinedRow,
  type RawEventRow,
  readCheckpoint,
  readLastRunSequences,
  readQuarantined,
  type StepRow,
  writeCheckpoint,
} from "./tables.js";
