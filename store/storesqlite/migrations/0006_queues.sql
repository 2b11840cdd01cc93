-- Namespaces and queues as objects (store.QueueStore, docs/queues.md). A namespace or
-- queue without a row behaves with the implicit defaults. Times are unix nanoseconds;
-- durations nanoseconds.
CREATE TABLE namespaces (
    name          TEXT    NOT NULL PRIMARY KEY,
    retention     INTEGER NOT NULL,
    default_queue TEXT    NOT NULL,
    payload_limit INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;

-- A queue's limits (0: none). rate_tokens/rate_at are its token bucket: the tokens
-- left at rate_at, refilled at rate_per_second up to rate_burst, taken by claims.
CREATE TABLE queues (
    namespace         TEXT    NOT NULL,
    name              TEXT    NOT NULL,
    paused            INTEGER NOT NULL DEFAULT 0,
    concurrency_limit INTEGER NOT NULL DEFAULT 0,
    key_limit         INTEGER NOT NULL DEFAULT 0,
    rate_per_second   REAL    NOT NULL DEFAULT 0,
    rate_burst        INTEGER NOT NULL DEFAULT 0,
    rate_tokens       REAL    NOT NULL DEFAULT 0,
    rate_at           INTEGER,
    payload_limit     INTEGER NOT NULL DEFAULT 0,
    priority          INTEGER NOT NULL DEFAULT 0,
    retry             TEXT,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;

-- A run's concurrency key ('' for none): at most the queue's key_limit runs with
-- one key run at once.
ALTER TABLE runs ADD COLUMN concurrency_key TEXT NOT NULL DEFAULT '';

-- No index for the running runs of a queue: a claim on a limited queue counts them
-- through runs_running (bounded by the workers' slots), and every claim and finish
-- would pay for one.

-- A claim on a queue with a key limit walks the pending runs in claim order past
-- the runs of the keys at their limit; with the queue and key in the index it reads
-- no table row for them (a hot key's 100,000 waiting runs cost 10x less).
DROP INDEX runs_pending;
CREATE INDEX runs_pending ON runs (namespace, workflow, priority DESC, available_at, sequence, queue, concurrency_key)
    WHERE status = 'pending';
