export { type Analytics, type ClickHouseOptions, openAnalytics } from "./client.js";
export {
  AnalyticsError,
  AnalyticsUnavailableError,
  MigrationError,
  ProjectionMismatchError,
  QueryError,
} from "./errors.js";
export { loadMigrations, type Migration, migrate, splitStatements } from "./migrate.js";
export { listRuns, type RunRow, runSql, type SqlResult } from "./queries.js";
export { assertReadOnlyStatement } from "./sql-guard.js";
export {
  bindProjection,
  highWater,
  insertRows,
  nanoUsdToDecimal,
  type ProjectedTable,
  type ProjectionSource,
  type RawEventRow,
  type StepRow,
} from "./tables.js";
