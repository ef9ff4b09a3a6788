-- raw_events_v1 with the event's identity as its key. An event the projector inserts a
-- second time (a batch replayed after a crash, a part that landed while its sibling did
-- not, a late insert by a projector that lost its lease) has the same (run_id, run_seq),
-- unique per run by the log's per-run sequence check, and its copies meet in one
-- partition because the month comes from the event's own timestamp. ReplacingMergeTree
-- folds them into one row when the parts merge; every view reads the table FINAL, so
-- counts and sums are exact before the merge too.
CREATE TABLE IF NOT EXISTS raw_events_v2
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
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (run_id, run_seq);

-- Copies are folded by key, so copying again after an interrupted migration adds nothing.
INSERT INTO raw_events_v2 (event_id, type, schema_version, run_id, run_seq, stream_seq, ts, tag, payload)
SELECT event_id, type, schema_version, run_id, run_seq, stream_seq, ts, tag, payload
FROM raw_events_v1;

CREATE OR REPLACE VIEW events AS SELECT * FROM raw_events_v2 FINAL;
