-- The stream this database is a projection of. Checkpoints are stream sequences, which
-- mean nothing for another stream (or the same stream recreated), so a projector refuses
-- to write here unless it reads the stream named in this row.
CREATE TABLE IF NOT EXISTS projection_source
(
    stream         String,
    stream_created String,
    bound_at       DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY stream;
