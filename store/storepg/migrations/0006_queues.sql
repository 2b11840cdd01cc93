-- Namespaces and queues as objects (store.QueueStore, docs/queues.md). A namespace or
-- queue without a row behaves with the implicit defaults. Durations are nanoseconds.
CREATE TABLE namespaces (
    name          TEXT        NOT NULL PRIMARY KEY,
    retention     BIGINT      NOT NULL,
    default_queue TEXT        NOT NULL,
    payload_limit INTEGER     NOT NULL DEFAULT 0,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL
);

-- A queue's limits (0: none). rate_tokens/rate_at are its token bucket: the tokens
-- left at rate_at, refilled at rate_per_second up to rate_burst, taken by claims.
-- Claims on a namespace with a limited queue lock its rows (FOR UPDATE), so limits
-- hold across every claimer.
CREATE TABLE queues (
    namespace         TEXT             NOT NULL,
    name              TEXT             NOT NULL,
    paused            BOOLEAN          NOT NULL DEFAULT false,
    concurrency_limit INTEGER          NOT NULL DEFAULT 0,
    key_limit         INTEGER          NOT NULL DEFAULT 0,
    rate_per_second   DOUBLE PRECISION NOT NULL DEFAULT 0,
    rate_burst        INTEGER          NOT NULL DEFAULT 0,
    rate_tokens       DOUBLE PRECISION NOT NULL DEFAULT 0,
    rate_at           TIMESTAMPTZ,
    payload_limit     INTEGER          NOT NULL DEFAULT 0,
    priority          INTEGER          NOT NULL DEFAULT 0,
    retry             TEXT,
    created_at        TIMESTAMPTZ      NOT NULL,
    updated_at        TIMESTAMPTZ      NOT NULL,
    PRIMARY KEY (namespace, name)
);

-- A run's concurrency key ('' for none): at most the queue's key_limit runs with
-- one key run at once.
ALTER TABLE runs ADD COLUMN concurrency_key TEXT NOT NULL DEFAULT '';

-- No index for the running runs of a queue: a claim on a limited queue counts them
-- through runs_running (bounded by the workers' slots), and every claim and finish
-- would pay for one.
