-- Worker records (store.WorkerRegistry): one row per worker process of a namespace,
-- upserted by its heartbeat and deleted on graceful stop. workflows and queues are
-- JSON lists of names (queues '[]': every queue). Times are unix nanoseconds; a
-- worker is live while expires_at is in the future.
CREATE TABLE workers (
    namespace    TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    workflows    TEXT    NOT NULL,
    queues       TEXT    NOT NULL,
    version      TEXT    NOT NULL DEFAULT '',
    started_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;
