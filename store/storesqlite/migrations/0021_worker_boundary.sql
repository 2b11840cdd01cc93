-- The worker boundary (docs/security.md). secret_keys holds the keys every
-- server of the store shares (store.KeyStore), such as the one lease secrets
-- are signed with; a key is written once and never changed. workers.owner is
-- the principal whose worker made the record: another principal's heartbeat
-- may not replace it nor its removal delete it ('' for workers on the store
-- itself, which are trusted).
CREATE TABLE secret_keys (
    name       TEXT    NOT NULL PRIMARY KEY,
    key        BLOB    NOT NULL,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;

ALTER TABLE workers ADD COLUMN owner TEXT NOT NULL DEFAULT '';
