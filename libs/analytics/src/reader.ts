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
 * `break` makes a query that produces too many rows stop and return what it has.
 */
export function readerSettings(limits: QueryLimits): [string, string | number][] {
  return [
    ["max_result_rows", limits.maxRows + 1],
    ["max_result_bytes", limits.maxMemoryBytes],
    ["result_overflow_mode", "break"],
    ["max_execution_time", limits.maxExecutionMs / 1000],
    ["timeout_overflow_mode", "throw"],
    ["max_memory_usage", limits.maxMemoryBytes],
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
 * checked once, here: a reader that could write, or that runs without limits, is refused.
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
    query: `SELECT getSetting('readonly') AS readonly, getSetting('max_result_rows') AS max_result_rows,
      getSetting('max_execution_time') AS max_execution_time, getSetting('max_memory_usage') AS max_memory_usage`,
    format: "JSONEachRow",
  });
  const [profile] = await answer.json<Record<string, number | string>>();
  const missing = ["readonly", "max_result_rows", "max_execution_time", "max_memory_usage"].filter(
    (name) => Number(profile?.[name] ?? 0) === 0,
  );
  if (missing.length > 0) {
    return refuse(
      `clickhouse.reader_username runs with ${missing.map((m) => `${m} = 0`).join(", ")}: its settings profile must make it read-only and limit it (see the README).`,
    );
  }
  return {
    limits: {
      maxRows: Math.max(0, Number(profile?.max_result_rows) - 1),
      maxExecutionMs: Number(profile?.max_execution_time) * 1000,
      maxMemoryBytes: Number(profile?.max_memory_usage),
    },
    refusal: undefined,
    async query(sql, params) {
      const result = await client.query({ query: sql, query_params: params, format: "JSON" });
      return answerOf(await result.json<Record<string, unknown>>());
    },
    close: () => client.close(),
  };
}

function answerOf(body: ResponseJSON<Record<string, unknown>>): JsonAnswer {
  const statistics = body.statistics as JsonAnswer["statistics"];
  return { meta: body.meta ?? [], data: body.data, ...(statistics ? { statistics } : {}) };
}
