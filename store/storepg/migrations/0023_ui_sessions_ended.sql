-- The web UI's sessions ended before their expiry (store.SessionStore): the same
-- table as SQLite's 0023_ui_sessions_ended.sql, in Postgres types.
CREATE TABLE ui_sessions_ended (
    id         BYTEA       NOT NULL PRIMARY KEY,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX ui_sessions_ended_expires ON ui_sessions_ended (expires_at);
