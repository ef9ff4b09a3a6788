import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type ClickHouseClient, type ClickHouseSettings, createClient } from "@clickhouse/client";
import { Session } from "chdb";
import { createChdbConnection } from "chdb/connection";
import { AnalyticsUnavailableError } from "./errors.js";
import { DEFAULT_LIMITS, embeddedReader, type QueryLimits, type Reader, serverReader } from "./reader.js";

export interface ClickHouseOptions {
  /** A ClickHouse server (http[s]://host:port). Unset: embedded chDB under `dataDir`. */
  url?: string | undefined;
  /** Data directory of the embedded engine; required when `url` is unset. */
  dataDir?: string | undefined;
  database: string;
  username?: string;
  password?: string;
  /** Server only: the read-only user operator SQL runs as. Unset, a server refuses operator SQL. */
  readerUsername?: string | undefined;
  readerPassword?: string | undefined;
  /** What the engine enforces on operator SQL. */
  limits?: Partial<QueryLimits> | undefined;
}

export interface Analytics {
  /** Holdfast's own connection: migrations, the projector's inserts, its named reads. */
  readonly client: ClickHouseClient;
  readonly database: string;
  /** "embedded" (chDB in this process) or "server" (by URL). */
  readonly engine: "embedded" | "server";
  /** Where operator SQL runs: a connection the engine itself keeps from writing. */
  readonly reader: Reader;
  close(): Promise<void>;
}

/**
 * Settings that make both engines answer identically: 64-bit integers and decimals as JSON
 * numbers (counts and token sums stay far below 2^53), timestamps in UTC. They are
 * client-wide on purpose: chDB turns any per-query setting into a session-wide SET.
 */
export const SAME_ANSWERS: ClickHouseSettings = {
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
  const limits = { ...DEFAULT_LIMITS, ...options.limits };
  try {
    if (options.url) return await openServer(options.url, options, limits);
    if (!options.dataDir) throw new AnalyticsUnavailableError("embedded ClickHouse needs a data directory");
    return await openEmbedded(options.dataDir, options.database, limits);
  } catch (cause) {
    if (cause instanceof AnalyticsUnavailableError) throw cause;
    const where = options.url ?? `embedded chDB at ${options.dataDir}`;
    throw new AnalyticsUnavailableError(`cannot open ClickHouse (${where}): ${(cause as Error).message}`, {
      cause,
    });
  }
}

async function openServer(url: string, options: ClickHouseOptions, limits: QueryLimits): Promise<Analytics> {
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
  const reader = await serverReader({
    limits,
    client:
      options.readerUsername === undefined
        ? undefined
        : createClient({
            url,
            username: options.readerUsername,
            password: options.readerPassword ?? "",
            database: options.database,
            clickhouse_settings: SAME_ANSWERS,
          }),
  });
  return {
    client,
    database: options.database,
    engine: "server",
    reader,
    async close() {
      await reader.close();
      await client.close();
    },
  };
}

async function openEmbedded(dataDir: string, database: string, limits: QueryLimits): Promise<Analytics> {
  mkdirSync(dataDir, { recursive: true });
  // The engine is a process singleton configured by its first connection; this one boots
  // it with Holdfast's access rules and stays open for as long as the others are.
  const engine = new Session(dataDir, { connectionArgs: [`--config-file=${writeEngineConfig(dataDir)}`] });
  const connect = () =>
    createClient({
      // chdb implements the Connection contract of @clickhouse/client-common, which the client
      // package bundles a structurally identical copy of; the two copies' types do not unify.
      connection: createChdbConnection({ path: dataDir }) as unknown as ClientConnection,
      clickhouse_settings: SAME_ANSWERS,
    });
  try {
    const client = connect();
    await client.command({ query: `CREATE DATABASE IF NOT EXISTS ${database}` });
    // Each chDB connection is one session: USE makes the database the default for every
    // later query on it, as the `database` option does for a server.
    await client.command({ query: `USE ${database}` });
    const reader = embeddedReader({ connect, database, limits });
    return {
      client,
      database,
      engine: "embedded",
      reader,
      async close() {
        await reader.close();
        await client.close();
        engine.close();
      },
    };
  } catch (error) {
    engine.close();
    throw error;
  }
}

/**
 * The embedded engine's configuration: its one user may read, write and manage tables,
 * but has no grant on sources outside the database (file, url, s3, remote, executable,
 * mysql, …), on SYSTEM commands or on access management. Operator SQL additionally runs
 * read-only (see reader.ts). Written on every start, so an upgrade's rules take effect.
 */
function writeEngineConfig(dataDir: string): string {
  const dir = join(dataDir, "holdfast");
  mkdirSync(dir, { recursive: true });
  const users = join(dir, "users.xml");
  const config = join(dir, "config.xml");
  const grants =
    "SELECT, INSERT, ALTER, CREATE DATABASE, CREATE TABLE, CREATE VIEW, DROP DATABASE, DROP TABLE, DROP VIEW, TRUNCATE, OPTIMIZE, SHOW, TABLE ENGINE";
  writeFileSync(
    users,
    `<clickhouse>
  <profiles><default/></profiles>
  <quotas><default/></quotas>
  <users>
    <default>
      <password></password>
      <profile>default</profile>
      <quota>default</quota>
      <grants><query>GRANT ${grants} ON *.*</query></grants>
    </default>
  </users>
</clickhouse>
`,
  );
  writeFileSync(config, `<clickhouse>\n  <users_config>${xmlText(users)}</users_config>\n</clickhouse>\n`);
  return config;
}

function xmlText(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}
