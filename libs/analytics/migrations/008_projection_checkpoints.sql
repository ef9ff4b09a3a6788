-- How far the projection of a stream is complete: every event of `stream` on `subjects`
-- (the consumer's filter, one row per partition of the log) at or below `seq` is in every
-- projected table. The projector writes a row only after all of a batch's tables have
-- their rows, so a batch cut short anywhere (between tables, between the parts of a
-- two-month insert) leaves the checkpoint where it was and is replayed whole. Read as
-- max(seq): a late write from a projector that lost its lease can only say something
-- that was already true.
CREATE TABLE IF NOT EXISTS projection_checkpoints
(
    stream     String,
    subjects   String,
    seq        UInt64,
    written_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(seq)
ORDER BY (stream, subjects);
