-- Runs can be held and stopped (by a crossed limit or budget, an operator, or a standing
-- rule), and their calls parked while they are. A run's status is its last control event
-- (RunTripped, RunHeld, RunStopped, RunResumed) while that holds or stops it, else its
-- activity; the fleet's own events (standing rules, run id '') are not a run.
CREATE VIEW IF NOT EXISTS runs_v4 AS
SELECT
    e.run_id                                           AS run_id,
    e.last_tag                                         AS tag,
    e.last_tenant                                      AS tenant,
    if(s.last_model != '', s.last_model, e.requested)  AS model,
    multiIf(
        c.last_type = 'RunStopped'
            OR (c.last_type = 'RunTripped' AND JSONExtractString(c.last_payload, 'action') = 'RUN_ACTION_STOP'),
        'stopped',
        c.last_type IN ('RunHeld', 'RunTripped'), 'held',
        e.started > e.finished, 'running',
        'idle')                                        AS status,
    multiIf(
        c.last_type = 'RunTripped',
        concat('limit: ', lower(replaceOne(JSONExtractString(c.last_payload, 'trip', 'limit'), 'LIMIT_KIND_', ''))),
        c.last_type IN ('RunHeld', 'RunStopped'),
        concat(
            if(JSONExtractString(c.last_payload, 'ruleId') != '',
               concat('rule ', JSONExtractString(c.last_payload, 'ruleId')),
               'operator'),
            if(JSONExtractString(c.last_payload, 'reason') != '',
               concat(': ', JSONExtractString(c.last_payload, 'reason')),
               '')),
        '')                                            AS hold_reason,
    if(c.last_type IN ('RunHeld', 'RunTripped', 'RunStopped'), c.last_ts, NULL) AS held_since,
    e.parked                                           AS parked_calls,
    e.started                                          AS steps,
    e.started - e.finished                             AS in_flight,
    s.n_completed                                      AS completed,
    s.n_failed                                         AS failed,
    s.sum_input                                        AS input_tokens,
    s.sum_output                                       AS output_tokens,
    s.sum_cached                                       AS cached_input_tokens,
    s.sum_cache_write                                  AS cache_write_tokens,
    s.sum_reasoning                                    AS reasoning_tokens,
    s.sum_cost                                         AS cost_usd,
    s.n_unpriced                                       AS unpriced_steps,
    s.n_estimated                                      AS estimated_steps,
    e.first_ts                                         AS first_seen,
    e.last_ts                                          AS last_seen
FROM
(
    SELECT
        run_id,
        argMaxIf(tag, ts, tag != '')                                             AS last_tag,
        argMaxIf(tenant, ts, tenant != '')                                       AS last_tenant,
        argMaxIf(JSONExtractString(payload, 'model'), ts, type = 'StepStarted')  AS requested,
        countIf(type = 'StepStarted')                                            AS started,
        countIf(type IN ('StepCompleted', 'StepFailed'))                         AS finished,
        countIf(type = 'CallParked') - countIf(type = 'CallUnparked')            AS parked,
        min(ts)                                                                  AS first_ts,
        max(ts)                                                                  AS last_ts
    FROM raw_events_v2 FINAL
    WHERE run_id != ''
    GROUP BY run_id
) AS e
LEFT JOIN
(
    SELECT
        run_id,
        argMax(type, run_seq)     AS last_type,
        argMax(payload, run_seq)  AS last_payload,
        argMax(ts, run_seq)       AS last_ts
    FROM raw_events_v2 FINAL
    WHERE type IN ('RunTripped', 'RunHeld', 'RunStopped', 'RunResumed')
    GROUP BY run_id
) AS c ON c.run_id = e.run_id
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
        sum(cache_write_tokens)             AS sum_cache_write,
        sum(reasoning_tokens)               AS sum_reasoning,
        sum(ifNull(cost_usd, 0))            AS sum_cost,
        countIf(isNull(cost_usd))           AS n_unpriced,
        countIf(estimated)                  AS n_estimated
    FROM steps_v2 FINAL
    GROUP BY run_id
) AS s ON s.run_id = e.run_id;

CREATE OR REPLACE VIEW runs AS SELECT * FROM runs_v4;
