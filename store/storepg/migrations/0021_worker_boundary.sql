-- The worker boundary: the same as SQLite's 0021_worker_boundary.sql, in
-- Postgres types.
CREATE TABLE secret_keys (
    name       TEXT        NOT NULL PRIMARY KEY,
    key        BYTEA       NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

ALTER TABLE workers ADD COLUMN owner TEXT NOT NULL DEFAULT '';
