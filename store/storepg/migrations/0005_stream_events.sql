-- Stream events of runs (store.StreamEvent): what a workflow publishes with Emit and
-- its lifecycle, written with the checkpoints. runs.stream_seq is the sequence of a
-- run's last stream event; each write takes the next ones under the run's row lock,
-- so readers resume from a sequence.
ALTER TABLE runs ADD COLUMN stream_seq BIGINT NOT NULL DEFAULT 0;

CREATE TABLE stream_events (
    run_seq    BIGINT      NOT NULL,
    seq        BIGINT      NOT NULL,
    name       TEXT        NOT NULL,
    data       BYTEA,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_seq, seq)
);
