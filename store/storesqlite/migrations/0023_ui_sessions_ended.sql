-- The web UI's sessions ended before their expiry (store.SessionStore): a
-- signed-out session's random ID, kept until the session would have expired
-- (unix nanoseconds), so that a copy of its cookie is refused by every server of
-- the store; then purged in bounded batches.
CREATE TABLE ui_sessions_ended (
    id         BLOB    NOT NULL PRIMARY KEY,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX ui_sessions_ended_expires ON ui_sessions_ended (expires_at);
