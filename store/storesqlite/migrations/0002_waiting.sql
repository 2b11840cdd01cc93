-- Waiting without holding anything: events (inboxes), child runs in groups, approvals.

-- A child run knows its parent: parent_seq is the parent's sequence (NULL for a run
-- that is no child), parent_id its run ID (Run.ParentID), parent_position the op of
-- the parent that started the child's group, and item the child's index in it.
ALTER TABLE runs ADD COLUMN parent_seq INTEGER;
ALTER TABLE runs ADD COLUMN parent_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN parent_position INTEGER;
ALTER TABLE runs ADD COLUMN item INTEGER;
-- wait_events is the JSON list of event names that end a waiting run's wait early
-- (CheckpointParams.WaitEvents); NULL when none. Read only while status = 'waiting'.
ALTER TABLE runs ADD COLUMN wait_events TEXT;

-- RunChildren, held-child release and cancellation cascade: a parent's children by
-- group, in item order.
CREATE INDEX runs_children ON runs (parent_seq, parent_position, item)
    WHERE parent_seq IS NOT NULL;

-- Inboxes. seq is the global send order (AUTOINCREMENT: never reused). An event is
-- deleted when its run consumes it; its payload lives on in the run's history.
CREATE TABLE events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_seq INTEGER NOT NULL,
    name    TEXT    NOT NULL,
    payload BLOB,
    sent_at INTEGER NOT NULL
);
CREATE INDEX events_inbox ON events (run_seq, name, seq);

-- Child groups: one row per op of a parent that started children. Counters are
-- kept by the store as children end, in the transaction that ends them:
-- active = released (pending or running) and not finished, held = not yet
-- released, next_item = the first item that may still be held. ended is set once
-- the group has ended (parent notified, or would have been when detached).
CREATE TABLE child_groups (
    parent_seq      INTEGER NOT NULL,
    position        INTEGER NOT NULL,
    max_concurrency INTEGER NOT NULL DEFAULT 0,
    fail_fast       INTEGER NOT NULL DEFAULT 0,
    detached        INTEGER NOT NULL DEFAULT 0,
    total           INTEGER NOT NULL,
    active          INTEGER NOT NULL,
    held            INTEGER NOT NULL,
    next_item       INTEGER NOT NULL,
    succeeded       INTEGER NOT NULL DEFAULT 0,
    failed          INTEGER NOT NULL DEFAULT 0,
    cancelled       INTEGER NOT NULL DEFAULT 0,
    ended           INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (parent_seq, position)
) WITHOUT ROWID;

-- Approval requests. seq is the creation order (listing newest first, cursors).
CREATE TABLE approvals (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace  TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    run_seq    INTEGER NOT NULL,
    position   INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    approvers  TEXT,
    subject    TEXT    NOT NULL DEFAULT '',
    details    BLOB,
    status     TEXT    NOT NULL,
    principal  TEXT    NOT NULL DEFAULT '',
    comment    TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    decided_at INTEGER
);
CREATE UNIQUE INDEX approvals_namespace_id ON approvals (namespace, id);
CREATE INDEX approvals_list ON approvals (namespace, seq);
CREATE INDEX approvals_run ON approvals (run_seq, seq);
