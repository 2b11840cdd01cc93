-- Worker records (store.WorkerRegistry): the same table as SQLite's 0003_workers.sql,
-- in Postgres types. queues '{}': every queue. A worker is live while expires_at is
-- in the future.
CREATE TABLE workers (
    namespace    TEXT        NOT NULL,
    name         TEXT        NOT NULL,
    workflows    TEXT[]      NOT NULL,
    queues       TEXT[]      NOT NULL,
    version      TEXT        NOT NULL DEFAULT '',
    started_at   TIMESTAMPTZ NOT NULL,
    last_seen_at TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, name)
);
