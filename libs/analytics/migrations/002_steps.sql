-- One row per finished model call (completed or failed): what ops sum for spend and count
-- for traffic. A call still in flight has only its StepStarted row in raw_events_v1.
CREATE TABLE IF NOT EXISTS steps_v1
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
ENGINE = MergeTree
PARTITION BY toYYYYMM(finished_at)
ORDER BY (finished_at, run_id, step);

CREATE VIEW IF NOT EXISTS steps AS SELECT * FROM steps_v1;
