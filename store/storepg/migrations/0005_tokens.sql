-- Bearer tokens (store.TokenStore): the same table as SQLite's 0005_tokens.sql, in
-- Postgres types. grants is JSON text, read and written by the shared code.
CREATE TABLE tokens (
    name       TEXT        NOT NULL PRIMARY KEY,
    hash       BYTEA       NOT NULL UNIQUE,
    grants     TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    revoked_at TIMESTAMPTZ
);
