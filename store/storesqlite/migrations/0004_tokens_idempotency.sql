-- Bearer tokens (store.TokenStore): global to the store, not of a namespace. hash is
-- the SHA-256 of the secret (the secret itself is never stored); grants is a JSON
-- list of {role, namespace, queue}. A revoked token keeps its row and its name.
-- Times are unix nanoseconds.
CREATE TABLE tokens (
    name       TEXT    NOT NULL PRIMARY KEY,
    hash       BLOB    NOT NULL UNIQUE,
    grants     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
) WITHOUT ROWID;

-- Idempotency keys (store.IdempotencyStore): per namespace, written in the same
-- transaction as the change each guards, kept store.IdempotencyTTL (24 hours) after
-- created_at, then purged in bounded batches. fingerprint identifies the request
-- (method, path, body, principal); status and body are its response, replayed.
CREATE TABLE idempotency_keys (
    namespace   TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    fingerprint BLOB    NOT NULL,
    status      INTEGER NOT NULL,
    body        BLOB,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
