-- Every event of the log, one row each, as the projector received it. The payload is the
-- proto3 JSON form, for ad-hoc questions no typed table answers yet.
CREATE TABLE IF NOT EXISTS raw_events_v1
(
    event_id       String,
    type           LowCardinality(String),
    schema_version UInt16,
    run_id         String,
    run_seq        UInt64,
    stream_seq     UInt64,
    ts             DateTime64(3, 'UTC'),
    tag            LowCardinality(String),
    payload        String
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (run_id, run_seq);

CREATE VIEW IF NOT EXISTS events AS SELECT * FROM raw_events_v1;
