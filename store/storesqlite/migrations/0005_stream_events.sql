-- Stream events of runs (store.StreamEvent): what a workflow publishes with Emit and
-- its lifecycle, written with the checkpoints. runs.stream_seq is the sequence of a
-- run's last stream event; each write takes the next ones, so readers resume from a
-- sequence. Times are unix nanoseconds.
ALTER TABLE runs ADD COLUMN stream_seq INTEGER NOT NULL DEFAULT 0;

CREATE TABLE stream_events (
    run_seq    INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    data       BLOB,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_seq, seq)
) WITHOUT ROWID;
