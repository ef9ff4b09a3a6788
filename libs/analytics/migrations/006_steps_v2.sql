-- steps_v1 keyed by the outcome event it came from: time first, for range scans, then the
-- run and the event's id, which together are that event's identity. A re-inserted outcome
-- folds into one row (ReplacingMergeTree; partitions by the event's own month); the views
-- read FINAL, so sums are exact before merges.
CREATE TABLE IF NOT EXISTS steps_v2
(
    step_id             String,
    run_id              String,
    step                UInt32,
    tag                 LowCardinality(String),
    api                 LowCardinality(String),
    model               LowCardinality(String),
    stream              Bool,
    status              LowCardinality(String),
    failure_reason      LowCardinality(String),
    upstream_status     UInt16,
    error_type          String,
    error_code          String,
    usage_reported      Bool,
    input_tokens        UInt64,
    output_tokens       UInt64,
    cached_input_tokens UInt64,
    -- NULL when the price is unknown: never summed as if it were free.
    cost_usd            Nullable(Decimal(18, 9)),
    latency_ms          UInt32,
    first_byte_ms       UInt32,
    finish_reason       LowCardinality(String),
    tool_calls          Array(String),
    finished_at         DateTime64(3, 'UTC'),
    event_id            String,
    stream_seq          UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(finished_at)
ORDER BY (finished_at, run_id, event_id);

INSERT INTO steps_v2 (step_id, run_id, step, tag, api, model, stream, status, failure_reason, upstream_status,
       error_type, error_code, usage_reported, input_tokens, output_tokens, cached_input_tokens,
       cost_usd, latency_ms, first_byte_ms, finish_reason, tool_calls, finished_at, event_id, stream_seq)
SELECT step_id, run_id, step, tag, api, model, stream, status, failure_reason, upstream_status,
       error_type, error_code, usage_reported, input_tokens, output_tokens, cached_input_tokens,
       cost_usd, latency_ms, first_byte_ms, finish_reason, tool_calls, finished_at, event_id, stream_seq
FROM steps_v1;

CREATE OR REPLACE VIEW steps AS SELECT * FROM steps_v2 FINAL;
