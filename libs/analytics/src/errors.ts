/** Errors of the analytics store. `retryable` says whether the same call can succeed later. */
export abstract class AnalyticsError extends Error {
  abstract readonly code: string;
  abstract readonly retryable: boolean;
}

/** ClickHouse could not be opened or reached. */
export class AnalyticsUnavailableError extends AnalyticsError {
  override readonly name = "AnalyticsUnavailableError";
  readonly code = "HOLDFAST_ANALYTICS_UNAVAILABLE";
  readonly retryable = true;
}

/** A query was refused by ClickHouse (syntax, unknown table, readonly). Carries ClickHouse's message. */
export class QueryError extends AnalyticsError {
  override readonly name: string = "QueryError";
  readonly code: string = "HOLDFAST_QUERY_FAILED";
  readonly retryable = false;
}

/** An operator query hit a limit the engine enforces (rows, time, memory); the message names the setting. */
export class QueryLimitError extends QueryError {
  override readonly name = "QueryLimitError";
  override readonly code = "HOLDFAST_QUERY_LIMIT";
}

/** A migration failed; the database is left at the last migration that succeeded. */
export class MigrationError extends AnalyticsError {
  override readonly name = "MigrationError";
  readonly code = "HOLDFAST_MIGRATION_FAILED";
  readonly retryable = false;
}

/** The database already holds the projection of a different event stream. */
export class ProjectionMismatchError extends AnalyticsError {
  override readonly name = "ProjectionMismatchError";
  readonly code = "HOLDFAST_PROJECTION_MISMATCH";
  readonly retryable = false;
}
