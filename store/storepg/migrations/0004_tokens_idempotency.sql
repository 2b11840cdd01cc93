-- Bearer tokens (store.TokenStore): the same table as SQLite's 0005_tokens_idempotency.sql, in
-- Postgres types. grants is JSON text, read and written by the shared code.
CREATE TABLE tokens (
    name       TEXT        NOT NULL PRIMARY KEY,
    hash       BYTEA       NOT NULL UNIQUE,
    grants     TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    revoked_at TIMESTAMPTZ
);

-- Idempotency keys (store.IdempotencyStore): the same table as SQLite's.
CREATE TABLE idempotency_keys (
    namespace   TEXT        NOT NULL,
    key         TEXT        NOT NULL,
    fingerprint BYTEA       NOT NULL,
    status      INTEGER     NOT NULL,
    body        BYTEA,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
