-- runs_v1 over the v2 tables, read FINAL: a run row counts each event once, however many
-- times the projector inserted it. Inner aliases differ from column names: ClickHouse
-- resolves a name to an alias before a column.
CREATE VIEW IF NOT EXISTS runs_v2 AS
SELECT
    e.run_id                                           AS run_id,
    e.last_tag                                         AS tag,
    if(s.last_model != '', s.last_model, e.requested)  AS model,
    if(e.started > e.finished, 'running', 'idle')      AS status,
    e.started                                          AS steps,
    e.started - e.finished                             AS in_flight,
    s.n_completed                                      AS completed,
    s.n_failed                                         AS failed,
    s.sum_input                                        AS input_tokens,
    s.sum_output                                       AS output_tokens,
    s.sum_cached                                       AS cached_input_tokens,
    s.sum_cost                                         AS cost_usd,
    s.n_unpriced                                       AS unpriced_steps,
    e.first_ts                                         AS first_seen,
    e.last_ts                                          AS last_seen
FROM
(
    SELECT
        run_id,
        argMaxIf(tag, ts, tag != '')                                             AS last_tag,
        argMaxIf(JSONExtractString(payload, 'model'), ts, type = 'StepStarted')  AS requested,
        countIf(type = 'StepStarted')                                            AS started,
        countIf(type IN ('StepCompleted', 'StepFailed'))                         AS finished,
        min(ts)                                                                  AS first_ts,
        max(ts)                                                                  AS last_ts
    FROM raw_events_v2 FINAL
    GROUP BY run_id
) AS e
LEFT JOIN
(
    SELECT
        run_id,
        argMax(model, finished_at)          AS last_model,
        countIf(status = 'completed')       AS n_completed,
        countIf(status = 'failed')          AS n_failed,
        sum(input_tokens)                   AS sum_input,
        sum(output_tokens)                  AS sum_output,
        sum(cached_input_tokens)            AS sum_cached,
        sum(ifNull(cost_usd, 0))            AS sum_cost,
        countIf(isNull(cost_usd))           AS n_unpriced
    FROM steps_v2 FINAL
    GROUP BY run_id
) AS s ON s.run_id = e.run_id;

CREATE OR REPLACE VIEW runs AS SELECT * FROM runs_v2;
