-- Durable runs (holdfast.v1.Runs): each run submitted to the scheduler, its agent and
-- version, and where it stands from its last durable event. Its model calls are the run's
-- steps like any other run's; its own steps (StepRecorded) are counted here.
CREATE VIEW IF NOT EXISTS durable_runs_v1 AS
SELECT
    run_id,
    argMaxIf(JSONExtractString(payload, 'agent'), run_seq, type = 'RunSubmitted')                AS agent,
    argMaxIf(JSONExtractString(payload, 'version'), run_seq,
             type = 'RunSubmitted' OR (type = 'RunRedriven' AND JSONExtractString(payload, 'version') != '')) AS version,
    argMaxIf(JSONExtractString(payload, 'partitionKey'), run_seq, type = 'RunSubmitted')         AS partition_key,
    argMax(type, run_seq)                                                                         AS last_type,
    multiIf(argMax(type, run_seq) = 'RunFinished', 'finished',
            argMax(type, run_seq) = 'RunFailed', 'failed',
            argMax(type, run_seq) IN ('RunLeased', 'StepRecorded'), 'running',
            'queued')                                                                             AS durable_status,
    countIf(type = 'StepRecorded' AND JSONExtractBool(payload, 'ok'))                             AS steps_recorded,
    countIf(type = 'StepRecorded' AND NOT JSONExtractBool(payload, 'ok'))                         AS attempts_failed,
    countIf(type = 'RunLeased')                                                                   AS leases,
    countIf(type = 'RunRedriven')                                                                 AS redrives,
    minIf(ts, type = 'RunSubmitted')                                                              AS submitted_at
FROM raw_events_v2 FINAL
WHERE type IN ('RunSubmitted', 'RunLeased', 'StepRecorded', 'RunReleased', 'RunFinished', 'RunFailed', 'RunRedriven')
GROUP BY run_id;

CREATE OR REPLACE VIEW durable_runs AS SELECT * FROM durable_runs_v1;

-- runs_v5 with durable runs' own standing: queued, running, finished or failed (a hold or
-- a stop still says held or stopped), their agent and their recorded steps.
CREATE VIEW IF NOT EXISTS runs_v6 AS
SELECT
    r.* EXCEPT (status),
    multiIf(r.status IN ('held', 'stopped'), r.status,
            d.run_id != '', d.durable_status,
            r.status)                                  AS status,
    d.agent                                            AS agent,
    d.steps_recorded                                   AS durable_steps
FROM runs_v5 AS r
LEFT JOIN durable_runs_v1 AS d ON d.run_id = r.run_id;

CREATE OR REPLACE VIEW runs AS SELECT * FROM runs_v6;
