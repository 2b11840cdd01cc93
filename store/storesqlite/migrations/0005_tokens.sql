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
