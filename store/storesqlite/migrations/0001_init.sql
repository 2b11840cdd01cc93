-- Runs. sequence is the global creation order (AUTOINCREMENT: never reused) and the
-- key that ops, attempts and kv rows reference. Times are unix nanoseconds (UTC).
CREATE TABLE runs (
    sequence         INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace        TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    workflow_id      TEXT    NOT NULL,
    workflow         TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    status           TEXT    NOT NULL,
    version          INTEGER NOT NULL DEFAULT 0,
    input            BLOB,
    output           BLOB,
    error            TEXT,
    wait_reason      TEXT    NOT NULL DEFAULT '',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    deadline         INTEGER,
    available_at     INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT    NOT NULL DEFAULT '',
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at INTEGER,
    created_at       INTEGER NOT NULL,
    started_at       INTEGER,
    updated_at       INTEGER NOT NULL,
    finished_at      INTEGER
);

CREATE UNIQUE INDEX runs_namespace_id ON runs (namespace, id);

-- At most one active run per (namespace, workflow_id).
CREATE UNIQUE INDEX runs_active_workflow_id ON runs (namespace, workflow_id)
    WHERE status NOT IN ('succeeded', 'failed', 'cancelled');

-- Ref resolution by workflow ID (latest run) and listing newest first.
CREATE INDEX runs_workflow_id ON runs (namespace, workflow_id, sequence);
CREATE INDEX runs_list ON runs (namespace, sequence);

-- Claim: per workflow, pending runs in claim order (priority DESC, available_at,
-- sequence), so a claim reads only the rows it takes whatever the backlog.
CREATE INDEX runs_pending ON runs (namespace, workflow, priority DESC, available_at, sequence)
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
    run_seq     INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    kind        TEXT    NOT NULL,
    name        TEXT    NOT NULL DEFAULT '',
    done        INTEGER NOT NULL DEFAULT 0,
    result      BLOB,
    error       TEXT,
    attempts    INTEGER NOT NULL DEFAULT 0,
    started_at  INTEGER,
    finished_at INTEGER,
    PRIMARY KEY (run_seq, position)
) WITHOUT ROWID;

-- Failed attempts of steps.
CREATE TABLE attempts (
    run_seq     INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    error       TEXT    NOT NULL,
    started_at  INTEGER,
    finished_at INTEGER,
    PRIMARY KEY (run_seq, position, attempt)
) WITHOUT ROWID;

-- The run-scoped key-value store.
CREATE TABLE kv (
    run_seq INTEGER NOT NULL,
    key     TEXT    NOT NULL,
    value   BLOB,
    PRIMARY KEY (run_seq, key)
) WITHOUT ROWID;
