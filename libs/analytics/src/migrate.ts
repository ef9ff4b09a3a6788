import { readdir, readFile } from "node:fs/promises";
import type { Analytics } from "./client.js";
import { MigrationError } from "./errors.js";

const MIGRATIONS_DIR = new URL("../migrations/", import.meta.url);
const FILE = /^(\d{3})_[a-z0-9_]+\.sql$/;

export interface Migration {
  version: number;
  name: string;
  statements: string[];
}

export async function loadMigrations(): Promise<Migration[]> {
  const names = (await readdir(MIGRATIONS_DIR)).filter((n) => FILE.test(n)).sort();
  const migrations: Migration[] = [];
  for (const name of names) {
    const sql = await readFile(new URL(name, MIGRATIONS_DIR), "utf8");
    migrations.push({ version: Number(FILE.exec(name)![1]), name, statements: splitStatements(sql) });
  }
  return migrations;
}

/** Splits a file on semicolons that end a line; `--` comment lines are dropped. */
export function splitStatements(sql: string): string[] {
  const withoutComments = sql
    .split("\n")
    .filter((line) => !line.trimStart().startsWith("--"))
    .join("\n");
  return withoutComments
    .split(/;\s*(?:\n|$)/)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/**
 * Applies every migration not yet recorded, in order. Each statement is idempotent
 * (IF NOT EXISTS), so a migration interrupted halfway is simply applied again.
 * Returns the names applied by this call.
 */
export async function migrate(analytics: Analytics): Promise<string[]> {
  const { client } = analytics;
  await client.command({
    query: `CREATE TABLE IF NOT EXISTS schema_migrations
      (version UInt32, name String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3))
      ENGINE = ReplacingMergeTree ORDER BY version`,
  });
  const done = await client.query({
    query: "SELECT version FROM schema_migrations FINAL",
    format: "JSONEachRow",
  });
  const applied = new Set((await done.json<{ version: number }>()).map((r) => Number(r.version)));
  const ran: string[] = [];
  for (const migration of await loadMigrations()) {
    if (applied.has(migration.version)) continue;
    for (const statement of migration.statements) {
      try {
        await client.command({ query: statement });
      } catch (cause) {
        throw new MigrationError(`${migration.name}: ${(cause as Error).message}`, { cause });
      }
    }
    await client.insert({
      table: "schema_migrations",
      values: [{ version: migration.version, name: migration.name }],
      format: "JSONEachRow",
    });
    ran.push(migration.name);
  }
  return ran;
}
