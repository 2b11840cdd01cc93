-- The audit log (store.AuditStore): the same table as SQLite's 0024_audit.sql, in
-- Postgres types.
CREATE TABLE audit_log (
    seq         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          TIMESTAMPTZ NOT NULL,
    namespace   TEXT        NOT NULL,
    principal   TEXT        NOT NULL,
    action      TEXT        NOT NULL,
    target_type TEXT        NOT NULL,
    target_id   TEXT        NOT NULL,
    outcome     TEXT        NOT NULL,
    request_id  TEXT        NOT NULL,
    source      TEXT        NOT NULL,
    via         TEXT        NOT NULL,
    detail      TEXT        NOT NULL
);
CREATE INDEX audit_log_namespace ON audit_log (namespace, seq);
CREATE INDEX audit_log_expiry ON audit_log (namespace, at);
