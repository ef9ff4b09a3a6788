-- Events the projector could not use (bytes that are no envelope, a type its payload or
-- subject disagrees with, an integer out of range), each kept with why and its bytes as
-- stored, instead of stopping the projection. The log keeps the event itself for ever
-- (append-only) at `stream_seq`. One row per event however often its batch is projected:
-- keyed by its place in the stream, read FINAL; every column comes from the stored
-- message, so a copy is the same row.
CREATE TABLE IF NOT EXISTS quarantined_events_v1
(
    stream      String,
    stream_seq  UInt64,
    subject     String,
    -- The run and the type as the subject names them ('' for a provider key's or an agent's event).
    run_id      String,
    type        LowCardinality(String),
    reason      LowCardinality(String),
    detail      String,
    data_base64 String,
    bytes       UInt32,
    -- When the log stored it.
    stored_at   DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (stream, stream_seq);

CREATE OR REPLACE VIEW quarantined_events AS SELECT * FROM quarantined_events_v1 FINAL;
