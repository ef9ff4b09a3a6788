import { makeTempDir } from "@holdfast/test-harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Analytics, openAnalytics } from "./client.js";
import { ProjectionMismatchError } from "./errors.js";
import { loadMigrations, migrate } from "./migrate.js";
import { listRuns, runSql } from "./queries.js";
import {
  bindProjection,
  insertRows,
  nanoUsdToDecimal,
  type RawEventRow,
  readCheckpoint,
  type StepRow,
  writeCheckpoint,
} from "./tables.js";

let dir: Awaited<ReturnType<typeof makeTempDir>>;
let analytics: Analytics;

beforeAll(async () => {
  dir = await makeTempDir("analytics");
  analytics = await openAnalytics({ dataDir: `${dir.path}/ch`, database: "holdfast_test" });
  await migrate(analytics);
});
afterAll(async () => {
  await analytics.close();
  await dir[Symbol.asyncDispose]();
});

function raw(runId: string, seq: number, type: string, extra: Partial<RawEventRow> = {}): RawEventRow {
  return {
    event_id: `${runId}-${seq}`,
    type,
    schema_version: 1,
    run_id: runId,
    run_seq: seq,
    stream_seq: seq,
    ts: 1_764_680_000_000 + seq,
    tag: "prod",
    tenant: "",
    payload: JSON.stringify({ model: "gpt-4o-mini" }),
    ...extra,
  };
}

function step(
  runId: string,
  seq: number,
  cost: string | null,
  finishedAt = 1_764_680_000_000 + seq,
): StepRow {
  return {
    step_id: `${runId}-s${seq}`,
    run_id: runId,
    step: 1,
    tag: "prod",
    api: "openai_chat_completions",
    model: "gpt-4o-mini-2024-07-18",
    stream: false,
    status: "completed",
    failure_reason: "",
    upstream_status: 200,
    error_type: "",
    error_code: "",
    usage_reported: true,
    input_tokens: 100,
    output_tokens: 20,
    cached_input_tokens: 0,
    cache_write_tokens: 0,
    reasoning_tokens: 0,
    cost_usd: cost,
    cost_problem: "",
    estimated: false,
    usage_estimate: "",
    usage_problem: "",
    unknown_price: false,
    response_id: "",
    tenant: "",
    latency_ms: 30,
    first_byte_ms: 10,
    finish_reason: "stop",
    tool_calls: ["get_weather"],
    finished_at: finishedAt,
    event_id: `${runId}-${seq}`,
    stream_seq: seq,
  };
}

describe("analytics store (embedded ClickHouse)", () => {
  it("runs embedded and migrates idempotently", async () => {
    expect(analytics.engine).toBe("embedded");
    const all = (await loadMigrations()).map((m) => m.name);
    // The first migrate of this database applied everything; a second applies nothing.
    const again = await migrate(analytics);
    const third = await migrate(analytics);
    expect(again.length === 0 || again.join() === all.join()).toBe(true);
    expect(third).toEqual([]);
    const tables = await runSql(
      analytics,
      "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name",
      {
        maxRows: 100,
      },
    );
    expect(tables.rows.map((r) => r.name)).toEqual(
      expect.arrayContaining([
        "raw_events_v2",
        "steps_v2",
        "runs_v2",
        "projection_checkpoints",
        "runs",
        "steps",
        "events",
      ]),
    );
  });

  it("keeps one checkpoint per partition of the log, the highest written", async () => {
    const key = { stream: "HF_EVENTS", subjects: "hf.run.>" };
    expect(await readCheckpoint(analytics, key)).toBe(0);
    await writeCheckpoint(analytics, key, 40);
    await writeCheckpoint(analytics, key, 90);
    // A projector that lost its lease may write late: what it says was already true.
    await writeCheckpoint(analytics, key, 60);
    expect(await readCheckpoint(analytics, key)).toBe(90);
    expect(await readCheckpoint(analytics, { ...key, subjects: "hf.run.a.>" })).toBe(0);
  });

  it("counts an event inserted twice once, in every view, across a month boundary", async () => {
    // 2026-01-31T23:59:59.900Z and 2026-02-01T00:00:00.100Z: two partitions.
    const january = 1_769_903_999_900;
    const february = 1_769_904_000_100;
    const events = [
      raw("dup", 1, "StepStarted", { ts: january }),
      raw("dup", 2, "StepCompleted", { ts: january }),
      raw("dup", 3, "StepStarted", { ts: january }),
      raw("dup", 4, "StepCompleted", { ts: february }),
    ];
    const steps = [step("dup", 2, "0.000000007", january), step("dup", 4, "0.000000007", february)];
    await insertRows(analytics, "raw_events_v2", events);
    await insertRows(analytics, "steps_v2", steps);
    // A replayed batch, and a retried insert of one part of it.
    await insertRows(analytics, "raw_events_v2", events);
    await insertRows(analytics, "steps_v2", steps);
    await insertRows(analytics, "raw_events_v2", events.slice(3));
    await insertRows(analytics, "steps_v2", steps.slice(1));
    const totals = await runSql(
      analytics,
      "SELECT (SELECT count() FROM events WHERE run_id = 'dup') AS events, count() AS steps, sum(input_tokens) AS input, toString(sum(cost_usd)) AS cost FROM steps WHERE run_id = 'dup'",
      { maxRows: 1 },
    );
    expect(totals.rows[0]).toEqual({ events: 4, steps: 2, input: 200, cost: "0.000000014" });
    const [run] = (await listRuns(analytics, { limit: 100 })).filter((r) => r.run_id === "dup");
    expect(run).toMatchObject({ steps: 2, completed: 2, in_flight: 0, input_tokens: 200, status: "idle" });
  });

  it("copies what the v1 tables held into v2 when it migrates, and copying again adds nothing", async () => {
    // Rows the last release wrote, before this database took the v2 migrations.
    await analytics.client.insert({
      table: "raw_events_v1",
      values: [raw("old", 1, "StepStarted"), raw("old", 2, "StepCompleted")].map(
        ({ tenant: _, ...v1 }) => v1,
      ),
      format: "JSONEachRow",
    });
    await analytics.client.insert({
      table: "steps_v1",
      values: [step("old", 2, "0.000000005")].map(
        ({
          tenant: _t,
          cost_problem: _c,
          cache_write_tokens: _w,
          reasoning_tokens: _r,
          estimated: _e,
          usage_estimate: _ue,
          usage_problem: _up,
          unknown_price: _u,
          response_id: _i,
          ...v1
        }) => v1,
      ),
      format: "JSONEachRow",
    });
    const copies = (await loadMigrations()).filter((m) => m.name.endsWith("_v2.sql"));
    expect(copies.map((m) => m.name)).toEqual([
      "005_raw_events_v2.sql",
      "006_steps_v2.sql",
      "007_runs_v2.sql",
    ]);
    // Twice, as after a migration interrupted before it was recorded.
    for (let i = 0; i < 2; i++) {
      for (const statement of copies.flatMap((m) => m.statements))
        await analytics.client.command({ query: statement });
    }
    const [old] = (await listRuns(analytics, { limit: 100 })).filter((r) => r.run_id === "old");
    expect(old).toMatchObject({ steps: 1, completed: 1, input_tokens: 100, cost_usd: 0.000000005 });
  });

  it("sums cost exactly and keeps an unknown cost out of the sum, counted apart", async () => {
    await insertRows(analytics, "raw_events_v2", [
      raw("r2", 3, "StepStarted"),
      raw("r2", 4, "StepCompleted"),
      raw("r2", 5, "StepStarted"),
      raw("r2", 6, "StepCompleted"),
      raw("r2", 7, "StepStarted"),
    ]);
    await insertRows(analytics, "steps_v2", [
      step("r2", 4, nanoUsdToDecimal(100_000_001)),
      step("r2", 6, null),
    ]);
    const [r2] = (await listRuns(analytics, { limit: 10 })).filter((r) => r.run_id === "r2");
    expect(r2).toMatchObject({
      run_id: "r2",
      tag: "prod",
      model: "gpt-4o-mini-2024-07-18",
      status: "running",
      steps: 3,
      in_flight: 1,
      completed: 2,
      input_tokens: 200,
      unpriced_steps: 1,
    });
    const exact = await runSql(
      analytics,
      "SELECT toString(sum(cost_usd)) AS total FROM steps WHERE run_id = 'r2'",
      {
        maxRows: 1,
      },
    );
    expect(exact.rows[0]?.total).toBe("0.100000001");
  });

  it("counts a negative cost projected before its check as 0, flagged, when it migrates", async () => {
    // As the projection wrote a forged negative cost before it applied the fold's bounds.
    await insertRows(analytics, "raw_events_v2", [
      raw("neg", 1, "StepStarted"),
      raw("neg", 2, "StepCompleted"),
    ]);
    await insertRows(analytics, "steps_v2", [step("neg", 2, "-5000000.000000000"), step("neg", 3, "0.25")]);
    const checks = (await loadMigrations()).filter((m) => m.name === "016_cost_checks.sql");
    expect(checks).toHaveLength(1);
    // Twice, as after a migration interrupted before it was recorded.
    for (let i = 0; i < 2; i++) {
      for (const statement of checks.flatMap((m) => m.statements))
        await analytics.client.command({ query: statement });
    }
    const rows = await runSql(
      analytics,
      "SELECT step_id, toString(cost_usd) AS cost, cost_problem FROM steps WHERE run_id = 'neg' ORDER BY step_id",
      { maxRows: 10 },
    );
    expect(rows.rows).toEqual([
      { step_id: "neg-s2", cost: "0", cost_problem: "cost -5000000 USD is negative; counted as 0" },
      { step_id: "neg-s3", cost: "0.25", cost_problem: "" },
    ]);
    const [run] = (await listRuns(analytics, { limit: 100 })).filter((r) => r.run_id === "neg");
    expect(run?.cost_usd).toBe(0.25);
  });

  it("names the problem in a bad query", async () => {
    await expect(runSql(analytics, "SELECT FROM WHERE", { maxRows: 10 })).rejects.toThrow(/Syntax error/);
    await expect(runSql(analytics, "SELECT * FROM no_such_table", { maxRows: 10 })).rejects.toThrow(
      /no_such_table/,
    );
  });

  it("converts nano-dollars to exact decimal text", () => {
    expect(nanoUsdToDecimal(0)).toBe("0.000000000");
    expect(nanoUsdToDecimal(1)).toBe("0.000000001");
    expect(nanoUsdToDecimal(1_234_567_890_123)).toBe("1234.567890123");
  });
});

describe("projection binding", () => {
  it("binds the database to the first stream and refuses any other", async () => {
    await bindProjection(analytics, { stream: "HF_EVENTS", created: "2026-12-01T00:00:00Z" });
    await bindProjection(analytics, { stream: "HF_EVENTS", created: "2026-12-01T00:00:00Z" });
    await expect(
      bindProjection(analytics, { stream: "OTHER_EVENTS", created: "2026-12-01T00:00:00Z" }),
    ).rejects.toThrow(/projection of HF_EVENTS/);
    // The same name recreated restarts its sequences: refused too.
    await expect(
      bindProjection(analytics, { stream: "HF_EVENTS", created: "2026-12-02T00:00:00Z" }),
    ).rejects.toBeInstanceOf(ProjectionMismatchError);
  });
});
