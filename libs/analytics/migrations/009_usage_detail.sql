-- What the three API shapes report and the envelope now carries: cache-write and
-- reasoning tokens, the provider's response id, whether a step was charged from
-- Holdfast's estimate (its outcome lost with its gateway), and the run's tenant.
ALTER TABLE raw_events_v2 ADD COLUMN IF NOT EXISTS tenant LowCardinality(String) DEFAULT '';
ALTER TABLE steps_v2 ADD COLUMN IF NOT EXISTS cache_write_tokens UInt64 DEFAULT 0;
ALTER TABLE steps_v2 ADD COLUMN IF NOT EXISTS reasoning_tokens UInt64 DEFAULT 0;
ALTER TABLE steps_v2 ADD COLUMN IF NOT EXISTS estimated Bool DEFAULT false;
ALTER TABLE steps_v2 ADD COLUMN IF NOT EXISTS response_id String DEFAULT '';
ALTER TABLE steps_v2 ADD COLUMN IF NOT EXISTS tenant LowCardinality(String) DEFAULT '';

-- The views list the columns as they were when made: made again, they have the new ones.
CREATE OR REPLACE VIEW events AS SELECT * FROM raw_events_v2 FINAL;
CREATE OR REPLACE VIEW steps AS SELECT * FROM steps_v2 FINAL;

CREATE VIEW IF NOT EXISTS runs_v3 AS
SELECT
    e.run_id                                           AS run_id,
    e.last_tag                                         AS tag,
    e.last_tenant                                      AS tenant,
    if(s.last_model != '', s.last_model, e.requested)  AS model,
    if(e.started > e.finished, 'running', 'idle')      AS status,
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
        sum(cache_write_tokens)             AS sum_cache_write,
        sum(reasoning_tokens)               AS sum_reasoning,
        sum(ifNull(cost_usd, 0))            AS sum_cost,
        countIf(isNull(cost_usd))           AS n_unpriced,
        countIf(estimated)                  AS n_estimated
    FROM steps_v2 FINAL
    GROUP BY run_id
) AS s ON s.run_id = e.run_id;

CREATE OR REPLACE VIEW runs AS SELECT * FROM runs_v3;
