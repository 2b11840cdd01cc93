-- Runs. sequence is the global creation order and the key that ops, attempts and kv
-- rows reference. Times are TIMESTAMPTZ (microseconds, UTC). fillfactor leaves room on
-- each page so that updates which change no indexed column (a running checkpoint, a
-- lease extension) stay heap-only (HOT).
CREATE TABLE runs (
    sequence         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace        TEXT        NOT NULL,
    id               TEXT        NOT NULL,
    workflow_id      TEXT        NOT NULL,
    workflow         TEXT        NOT NULL,
    queue            TEXT        NOT NULL,
    priority         INTEGER     NOT NULL DEFAULT 0,
    status           TEXT        NOT NULL,
    version          INTEGER     NOT NULL DEFAULT 0,
    input            BYTEA,
    output           BYTEA,
    error            TEXT,
    wait_reason      TEXT        NOT NULL DEFAULT '',
    cancel_requested BOOLEAN     NOT NULL DEFAULT false,
    deadline         TIMESTAMPTZ,
    available_at     TIMESTAMPTZ,
    attempts         INTEGER     NOT NULL DEFAULT 0,
    lease_owner      TEXT        NOT NULL DEFAULT '',
    lease_token      BIGINT      NOT NULL DEFAULT 0,
    lease_expires_at TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL,
    started_at       TIMESTAMPTZ,
    updated_at       TIMESTAMPTZ NOT NULL,
    finished_at      TIMESTAMPTZ
) WITH (fillfactor = 80);

CREATE UNIQUE INDEX runs_namespace_id ON runs (namespace, id);

-- At most one active run per (namespace, workflow_id).
CREATE UNIQUE INDEX runs_active_workflow_id ON runs (namespace, workflow_id)
    WHERE status NOT IN ('succeeded', 'failed', 'cancelled');

-- Ref resolution by workflow ID (latest run) and listing newest first.
CREATE INDEX runs_workflow_id ON runs (namespace, workflow_id, sequence);
CREATE INDEX runs_list ON runs (namespace, sequence);

-- Claim: pending runs in claim order (priority DESC, available_at, sequence).
CREATE INDEX runs_pending ON runs (namespace, priority DESC, available_at, sequence)
    WHERE status = 'pending';
-- NextDue among pending runs not yet due.
CREATE INDEX runs_pending_available ON runs (namespace, available_at)
    WHERE status = 'pending';
-- Timers: waiting runs with a wake-up time.
CREATE INDEX runs_waiting ON runs (namespace, available_at)
    WHERE status = 'waiting' AND available_at IS NOT NULL;
-- Lease expiry of running runs.
CREATE INDEX runs_running ON runs (namespace, lease_expires_at)
    WHERE status = 'running';
-- RunsResumeBlocked.
CREATE INDEX runs_blocked ON runs (namespace, workflow)
    WHERE status = 'blocked';

-- History: one row per op position.
CREATE TABLE ops (
    run_seq     BIGINT      NOT NULL,
    position    INTEGER     NOT NULL,
    kind        TEXT        NOT NULL,
    name        TEXT        NOT NULL DEFAULT '',
    done        BOOLEAN     NOT NULL DEFAULT false,
    result      BYTEA,
    error       TEXT,
    attempts    INTEGER     NOT NULL DEFAULT 0,
    started_at  TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    PRIMARY KEY (run_seq, position)
);

-- Failed attempts of steps.
CREATE TABLE attempts (
    run_seq     BIGINT      NOT NULL,
    position    INTEGER     NOT NULL,
    attempt     INTEGER     NOT NULL,
    error       TEXT        NOT NULL,
    started_at  TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    PRIMARY KEY (run_seq, position, attempt)
);

-- The run-scoped key-value store.
CREATE TABLE kv (
    run_seq BIGINT NOT NULL,
    key     TEXT   NOT NULL,
    value   BYTEA,
    PRIMARY KEY (run_seq, key)
);
