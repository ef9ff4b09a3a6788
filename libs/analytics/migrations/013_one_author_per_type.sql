-- Each event type has one author (its NATS credential may publish it, no other may), so
-- what a gateway decides is no longer written as an operator's event: a standing rule's
-- hold is RunHeldByRule (it was a RunHeld naming the rule), a rate-limit checkpoint's end
-- is CheckpointCleared (it was a RunResumed with `checkpoint`), and an answer gated on a
-- run stopped while its call was in flight is refused on the gated event itself
-- (`runStopped`; it was a ToolCallDenied by the gate). Older events keep their reading.
CREATE VIEW IF NOT EXISTS tool_gate_v2 AS
SELECT
    g.run_id                                           AS run_id,
    g.tenant                                           AS tenant,
    g.tag                                              AS tag,
    g.gate_id                                          AS gate_id,
    g.kind                                             AS kind,
    g.step                                             AS step,
    g.step_id                                          AS step_id,
    g.model                                            AS model,
    g.tool                                             AS tool,
    g.arguments                                        AS arguments,
    g.rule                                             AS rule,
    g.repeats                                          AS repeats,
    g.action                                           AS action,
    g.request_hash                                     AS request_hash,
    g.answer_hash                                      AS answer_hash,
    g.gated_at                                         AS gated_at,
    multiIf(g.run_stopped, 'denied', d.decision = '', 'pending', d.decision) AS decision,
    multiIf(g.run_stopped, g.gated_at, d.decision = '', NULL, d.decided_at) AS decided_at,
    if(g.run_stopped, g.actor, d.decided_by)           AS decided_by,
    if(g.run_stopped, 'the run is stopped', d.reason)  AS reason
FROM
(
    SELECT
        run_id,
        tenant,
        tag,
        JSONExtractString(payload, 'gateId')                                          AS gate_id,
        if(type = 'ToolCallGated', 'gate', 'loop')                                    AS kind,
        JSONExtractUInt(payload, 'step')                                              AS step,
        JSONExtractString(payload, 'stepId')                                          AS step_id,
        JSONExtractString(payload, 'model')                                           AS model,
        if(type = 'ToolCallGated', JSONExtractString(payload, 'toolCall', 'name'),
           JSONExtractString(payload, 'toolCalls', 1, 'name'))                        AS tool,
        if(type = 'ToolCallGated', JSONExtractString(payload, 'toolCall', 'arguments'),
           JSONExtractString(payload, 'toolCalls', 1, 'arguments'))                   AS arguments,
        if(type = 'ToolCallGated', JSONExtractString(payload, 'rule'), 'max_repeated_tool_calls') AS rule,
        JSONExtractUInt(payload, 'repeats')                                           AS repeats,
        lower(replaceOne(JSONExtractString(payload, 'action'), 'RUN_ACTION_', ''))    AS action,
        JSONExtractString(payload, 'requestHash')                                     AS request_hash,
        JSONExtractString(payload, 'answerHash')                                      AS answer_hash,
        ts                                                                            AS gated_at,
        JSONExtractBool(payload, 'runStopped')                                        AS run_stopped,
        JSONExtractString(payload, 'actor', 'name')                                   AS actor
    FROM raw_events_v2 FINAL
    WHERE type IN ('ToolCallGated', 'LoopDetected')
) AS g
LEFT JOIN
(
    SELECT
        run_id,
        JSONExtractString(payload, 'gateId')                                          AS gate_id,
        multiIf(type = 'ToolCallApproved', 'approved', type = 'ToolCallDenied', 'denied', 'abandoned') AS decision,
        ts                                                                            AS decided_at,
        if(type = 'ToolCallAbandoned', JSONExtractString(payload, 'gateway'),
           JSONExtractString(payload, 'actor', 'name'))                               AS decided_by,
        if(type = 'ToolCallAbandoned', JSONExtractString(payload, 'why'),
           JSONExtractString(payload, 'reason'))                                      AS reason
    FROM raw_events_v2 FINAL
    WHERE type IN ('ToolCallApproved', 'ToolCallDenied', 'ToolCallAbandoned')
) AS d ON d.run_id = g.run_id AND d.gate_id = g.gate_id;

CREATE OR REPLACE VIEW tool_gate AS SELECT * FROM tool_gate_v2;

CREATE VIEW IF NOT EXISTS runs_v7 AS
SELECT
    e.run_id                                           AS run_id,
    e.last_tag                                         AS tag,
    e.last_tenant                                      AS tenant,
    if(s.last_model != '', s.last_model, e.requested)  AS model,
    multiIf(
        c.last_type IN ('RunStopped', 'ToolCallDenied')
            OR (c.last_type = 'RunTripped' AND JSONExtractString(c.last_payload, 'action') = 'RUN_ACTION_STOP'),
        'stopped',
        c.last_type IN ('RunHeld', 'RunHeldByRule', 'RunTripped'), 'held',
        g.pending_stop > 0, 'stopped',
        g.pending > 0, 'held',
        e.started > e.finished, 'running',
        'idle')                                        AS status,
    multiIf(
        c.last_type = 'RunTripped',
        concat('limit: ', lower(replaceOne(JSONExtractString(c.last_payload, 'trip', 'limit'), 'LIMIT_KIND_', ''))),
        c.last_type IN ('RunHeld', 'RunHeldByRule', 'RunStopped'),
        concat(
            if(JSONExtractString(c.last_payload, 'ruleId') != '',
               concat('rule ', JSONExtractString(c.last_payload, 'ruleId')),
               'operator'),
            if(JSONExtractString(c.last_payload, 'reason') != '',
               concat(': ', JSONExtractString(c.last_payload, 'reason')),
               '')),
        c.last_type = 'ToolCallDenied',
        concat('gate: denied', if(JSONExtractString(c.last_payload, 'reason') != '',
                                  concat(': ', JSONExtractString(c.last_payload, 'reason')), '')),
        g.pending > 0, g.reason,
        '')                                            AS hold_reason,
    multiIf(c.last_type IN ('RunHeld', 'RunHeldByRule', 'RunTripped', 'RunStopped', 'ToolCallDenied'), c.last_ts,
            g.pending > 0, g.since,
            NULL)                                      AS held_since,
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
    WHERE type IN ('RunTripped', 'RunHeld', 'RunHeldByRule', 'RunStopped', 'RunResumed', 'CheckpointCleared')
        OR (type = 'ToolCallDenied' AND JSONExtractBool(payload, 'runStopped'))
    GROUP BY run_id
) AS c ON c.run_id = e.run_id
LEFT JOIN
(
    SELECT
        run_id,
        count()                                         AS pending,
        countIf(action = 'stop')                        AS pending_stop,
        argMax(if(kind = 'gate', concat('gate ', rule, ': ', tool),
                  concat('loop: ', tool, ' ', toString(repeats), ' times in a row')), gated_at) AS reason,
        max(gated_at)                                   AS since
    FROM tool_gate_v2
    WHERE decision = 'pending'
    GROUP BY run_id
) AS g ON g.run_id = e.run_id
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

CREATE VIEW IF NOT EXISTS runs_v8 AS
SELECT
    r.* EXCEPT (status),
    multiIf(r.status IN ('held', 'stopped'), r.status,
            d.run_id != '', d.durable_status,
            r.status)                                  AS status,
    d.agent                                            AS agent,
    d.steps_recorded                                   AS durable_steps
FROM runs_v7 AS r
LEFT JOIN durable_runs_v1 AS d ON d.run_id = r.run_id;

CREATE OR REPLACE VIEW runs AS SELECT * FROM runs_v8;
