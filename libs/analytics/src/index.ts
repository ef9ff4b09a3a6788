export { type Analytics, type ClickHouseOptions, openAnalytics } from "./client.js";
export { AnalyticsError, AnalyticsUnavailableError, MigrationError, QueryError } from "./errors.js";
export { loadMigrations, type Migration, migrate, splitStatements } from "./migrate.js";
export { listRuns, type RunRow, runSql, type SqlResult } from "./queries.js";
export {
  highWater,
  insertRows,
  nanoUsdToDecimal,
  type ProjectedTable,
  type RawEventRow,
  type StepRow,
} from "./tables.js";
