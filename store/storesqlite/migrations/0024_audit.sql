-- The audit log (store.AuditStore): one row per state change a principal asked a
-- server for, appended in batches. seq is the order of appending (AUTOINCREMENT:
-- never reused, so a list's cursor stays valid across purges); at is when the
-- request was answered (unix nanoseconds). namespace is '' for entries of no
-- namespace (tokens). Lists read newest first by seq, all of them or one
-- namespace's (audit_log_namespace); the retention purge deletes by namespace
-- and age (audit_log_expiry).
CREATE TABLE audit_log (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    at          INTEGER NOT NULL,
    namespace   TEXT    NOT NULL,
    principal   TEXT    NOT NULL,
    action      TEXT    NOT NULL,
    target_type TEXT    NOT NULL,
    target_id   TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    request_id  TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    via         TEXT    NOT NULL,
    detail      TEXT    NOT NULL
);
CREATE INDEX audit_log_namespace ON audit_log (namespace, seq);
CREATE INDEX audit_log_expiry ON audit_log (namespace, at);
