import { mkdirSync } from "node:fs";
import { type ClickHouseClient, type ClickHouseSettings, createClient } from "@clickhouse/client";
import { createChdbConnection } from "chdb/connection";
import { AnalyticsUnavailableError } from "./errors.js";

export interface ClickHouseOptions {
  /** A ClickHouse server (http[s]://host:port). Unset: embedded chDB under `dataDir`. */
  url?: string | undefined;
  /** Data directory of the embedded engine; required when `url` is unset. */
  dataDir?: string | undefined;
  database: string;
  username?: string;
  password?: string;
}

export interface Analytics {
  readonly client: ClickHouseClient;
  readonly database: string;
  /** "embedded" (chDB in this process) or "server" (by URL). */
  readonly engine: "embedded" | "server";
  /**
   * Settings for operator queries. A server scopes settings to one query, so readonly=2
   * guards them there. chDB applies settings as session-wide SET statements that would
   * outlive the query and lock the projector out of writing, so none are sent; both
   * engines also get the statement check in `runSql`.
   */
  readonly readerSettings: ClickHouseSettings;
  close(): Promise<void>;
}

// Settings that make both engines answer identically: 64-bit integers and decimals as JSON
// numbers (counts and token sums stay far below 2^53), timestamps in UTC. They are
// client-wide on purpose: chDB turns any per-query setting into a session-wide SET.
const SAME_ANSWERS: ClickHouseSettings = {
  output_format_json_quote_64bit_integers: 0,
  output_format_json_quote_decimals: 0,
  session_timezone: "UTC",
};

type ClientConnection = NonNullable<Parameters<typeof createClient>[0]>["connection"];

const DATABASE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Opens ClickHouse through @clickhouse/client: embedded chDB by default, a server when a
 * URL is configured. Everything after this function is the same code and the same SQL.
 * The database is created if missing and made the default for unqualified names.
 */
export async function openAnalytics(options: ClickHouseOptions): Promise<Analytics> {
  if (!DATABASE.test(options.database)) {
    throw new AnalyticsUnavailableError(
      `clickhouse.database "${options.database}" is not a plain identifier`,
    );
  }
  try {
    if (options.url) return await openServer(options.url, options);
    if (!options.dataDir) throw new AnalyticsUnavailableError("embedded ClickHouse needs a data directory");
    return await openEmbedded(options.dataDir, options.database);
  } catch (cause) {
    if (cause instanceof AnalyticsUnavailableError) throw cause;
    const where = options.url ?? `embedded chDB at ${options.dataDir}`;
    throw new AnalyticsUnavailableError(`cannot open ClickHouse (${where}): ${(cause as Error).message}`, {
      cause,
    });
  }
}

async function openServer(url: string, options: ClickHouseOptions): Promise<Analytics> {
  const auth = { username: options.username ?? "default", password: options.password ?? "" };
  const boot = createClient({ url, ...auth, clickhouse_settings: SAME_ANSWERS });
  try {
    await boot.command({ query: `CREATE DATABASE IF NOT EXISTS ${options.database}` });
  } finally {
    await boot.close();
  }
  const client = createClient({
    url,
    ...auth,
    database: options.database,
    clickhouse_settings: SAME_ANSWERS,
  });
  return {
    client,
    database: options.database,
    engine: "server",
    readerSettings: { readonly: "2" },
    close: () => client.close(),
  };
}

async function openEmbedded(dataDir: string, database: string): Promise<Analytics> {
  mkdirSync(dataDir, { recursive: true });
  const client = createClient({
    // chdb implements the Connection contract of @clickhouse/client-common, which the client
    // package bundles a structurally identical copy of; the two copies' types do not unify.
    connection: createChdbConnection({ path: dataDir }) as unknown as ClientConnection,
    clickhouse_settings: SAME_ANSWERS,
  });
  await client.command({ query: `CREATE DATABASE IF NOT EXISTS ${database}` });
  // The embedded engine is one session per process: USE makes the database the default
  // for every later query, as the `database` option does for a server.
  await client.command({ query: `USE ${database}` });
  return { client, database, engine: "embedded", readerSettings: {}, close: () => client.close() };
}
