import type { ClickHouseClient, ResponseJSON } from "@clickhouse/client";

/** What the engine enforces on every operator query. */
export interface QueryLimits {
  /** Rows a query may return; the engine stops producing rows past it. */
  maxRows: number;
  maxExecutionMs: number;
  /** Memory one query may use; its result is held to the same bound. */
  maxMemoryBytes: number;
}

export const DEFAULT_LIMITS: QueryLimits = {
  maxRows: 10_000,
  maxExecutionMs: 30_000,
  maxMemoryBytes: 1_073_741_824,
};

/** A query's JSON answer, as ClickHouse's JSON format gives it. */
export interface JsonAnswer {
  meta: { name: string; type: string }[];
  data: Record<string, unknown>[];
  statistics?: { elapsed: number; rows_read: number; bytes_read: number };
}

/**
 * The connection operator SQL runs on. The engine itself refuses writes, schema changes
 * and settings changes there (readonly), and enforces the limits.
 */
export interface Reader {
  readonly limits: QueryLimits;
  /** Why operator SQL cannot run on this deployment, or undefined when it can. */
  readonly refusal: string | undefined;
  /** One read statement with bound `{name:Type}` parameters, answered in JSON. */
  query(sql: string, params?: Record<string, unknown>): Promise<JsonAnswer>;
  close(): Promise<void>;
}

/**
 * The settings a reader session runs under. The limits are set first, readonly last:
 * from then on the session can change no setting, so neither can a query.
 * `break` makes a query that produces too many rows stop and return what it has. The
 * `eval` table function (a query built from a string) and the introspection functions
 * (the process's memory) are pinned off, whatever chDB's defaults are.
 */
export function readerSettings(limits: QueryLimits): [string, string | number][] {
  return [
    ["max_result_rows", limits.maxRows + 1],
    ["max_result_bytes", limits.maxMemoryBytes],
    ["result_overflow_mode", "break"],
    ["max_execution_time", limits.maxExecutionMs / 1000],
    ["timeout_overflow_mode", "throw"],
    ["max_memory_usage", limits.maxMemoryBytes],
    ["allow_experimental_eval_table_function", 0],
    ["allow_introspection_functions", 0],
    ["readonly", 1],
  ];
}

/**
 * Embedded chDB: a second connection to the engine, its own session, made read-only
 * with `SET readonly = 1` after the limits. Queries on it run one at a time, and after
 * any error the connection is replaced: chDB hands the output a failed query had
 * produced to the next query on the same connection.
 */
export function embeddedReader(options: {
  connect: () => ClickHouseClient;
  database: string;
  limits: QueryLimits;
}): Reader {
  let open: Promise<ClickHouseClient> | undefined;
  let tail: Promise<unknown> = Promise.resolve();
  const session = async (): Promise<ClickHouseClient> => {
    const client = options.connect();
    try {
      await client.command({ query: `USE ${options.database}` });
      for (const [name, value] of readerSettings(options.limits)) {
        await client.command({ query: `SET ${name} = ${typeof value === "string" ? `'${value}'` : value}` });
      }
      return client;
    } catch (error) {
      await client.close();
      throw error;
    }
  };
  const discard = async () => {
    const current = open;
    open = undefined;
    await current?.then((c) => c.close()).catch(() => undefined);
  };
  return {
    limits: options.limits,
    refusal: undefined,
    query(sql, params) {
      const run = tail.then(async () => {
        open ??= session();
        try {
          const client = await open;
          const result = await client.query({ query: sql, query_params: params, format: "JSON" });
          return answerOf(await result.json<Record<string, unknown>>());
        } catch (error) {
          await discard();
          throw error;
        }
      });
      tail = run.catch(() => undefined);
      return run;
    },
    async close() {
      await tail;
      await discard();
    },
  };
}

/**
 * A ClickHouse server: operator SQL runs as a dedicated user whose settings profile
 * makes it read-only and holds the limits (README, "ClickHouse server"). The profile is
 * checked once, here, from what the server says of the user's own settings
 * (`checkReaderProfile`); a reader that could write or lift a limit is refused.
 */
export async function serverReader(options: {
  client: ClickHouseClient | undefined;
  limits: QueryLimits;
}): Promise<Reader> {
  const { client, limits } = options;
  const refuse = (refusal: string): Reader => ({
    limits,
    refusal,
    query: () => Promise.reject(new Error(refusal)),
    close: async () => {
      await client?.close();
    },
  });
  if (client === undefined) {
    return refuse(
      "Operator SQL needs a read-only ClickHouse user on a server: set clickhouse.reader_username (see the README).",
    );
  }
  const answer = await client.query({
    query: "SELECT name, value, readonly FROM system.settings WHERE name IN {names:Array(String)}",
    query_params: { names: ["readonly", ...HELD_LIMITS.map((l) => l.setting)] },
    format: "JSONEachRow",
  });
  const checked = checkReaderProfile(await answer.json<SettingRow>(), limits);
  if ("refusal" in checked) return refuse(checked.refusal);
  return {
    limits: checked.limits,
    refusal: undefined,
    async query(sql, params) {
      const result = await client.query({ query: sql, query_params: params, format: "JSON" });
      return answerOf(await result.json<Record<string, unknown>>());
    },
    close: () => client.close(),
  };
}

/** A row of `system.settings` as the reader user sees it. */
export interface SettingRow {
  name: string;
  value: string;
  /** 1 when the user cannot change the setting: a `CONST` constraint, or `readonly = 1`. */
  readonly: number | string;
}

/** The profile settings that hold a limit, and the most Holdfast's configuration allows. */
const HELD_LIMITS: { setting: string; key: string; most: (limits: QueryLimits) => number }[] = [
  { setting: "max_result_rows", key: "analytics.max_rows + 1", most: (l) => l.maxRows + 1 },
  { setting: "max_result_bytes", key: "analytics.max_memory_bytes", most: (l) => l.maxMemoryBytes },
  {
    setting: "max_execution_time",
    key: "analytics.max_execution_ms / 1000",
    most: (l) => l.maxExecutionMs / 1000,
  },
  { setting: "max_memory_usage", key: "analytics.max_memory_bytes", most: (l) => l.maxMemoryBytes },
];

/**
 * Judges a server reader by its settings as the server reports them: `readonly` at
 * least 1; each limit set (0 is ClickHouse's "unlimited"), no higher than Holdfast's
 * configured one, and not changeable by the user (`CONST` in the profile, or
 * `readonly = 1`), since under `readonly = 2` a query's SETTINGS clause could lift it.
 * The profile's values are then the limits. Grants (no sources, no SYSTEM) are the
 * operator's to get right: a server does not list what a user may not do.
 */
export function checkReaderProfile(
  rows: readonly SettingRow[],
  limits: QueryLimits,
): { limits: QueryLimits } | { refusal: string } {
  const byName = new Map(rows.map((row) => [row.name, row]));
  const value = (name: string) => Number(byName.get(name)?.value ?? 0);
  const problems: string[] = [];
  const readonly = value("readonly");
  if (!(readonly >= 1)) problems.push(`readonly = ${byName.get("readonly")?.value ?? 0} (it must be 1 or 2)`);
  const loose: string[] = [];
  for (const { setting, key, most } of HELD_LIMITS) {
    const set = value(setting);
    if (!(set > 0)) problems.push(`${setting} = ${byName.get(setting)?.value ?? 0} (no limit)`);
    else if (set > most(limits)) problems.push(`${setting} = ${set}, above ${most(limits)} (${key})`);
    else if (Number(byName.get(setting)?.readonly) !== 1) loose.push(setting);
  }
  if (loose.length > 0) problems.push(`${loose.join(", ")} not CONST, so a query could lift them`);
  if (problems.length > 0) {
    return {
      refusal: `clickhouse.reader_username runs with ${problems.join("; ")}: its settings profile must make it read-only and hold the limits (see the README).`,
    };
  }
  return {
    limits: {
      maxRows: value("max_result_rows") - 1,
      maxExecutionMs: value("max_execution_time") * 1000,
      maxMemoryBytes: value("max_memory_usage"),
    },
  };
}

function answerOf(body: ResponseJSON<Record<string, unknown>>): JsonAnswer {
  const statistics = body.statistics as JsonAnswer["statistics"];
  return { meta: body.meta ?? [], data: body.data, ...(statistics ? { statistics } : {}) };
}
