-- Waiting without holding anything: events (inboxes), child runs in groups, approvals.
-- The same tables as SQLite's 0002_waiting.sql, in Postgres types.

-- A child run knows its parent: parent_seq is the parent's sequence (NULL for a run
-- that is no child), parent_id its run ID (Run.ParentID), parent_position the op of
-- the parent that started the child's group, and item the child's index in it.
-- wait_events lists the event names that end a waiting run's wait early
-- (CheckpointParams.WaitEvents); NULL when none. It is written by the waiting
-- checkpoint and cleared by every claim, so a later wait without WaitEvents (a
-- checkpoint of the fast path, which does not write it) is never woken by an event.
-- Adding nullable columns without defaults (and one with a constant default) only
-- changes the catalog: no table rewrite.
ALTER TABLE runs ADD COLUMN parent_seq BIGINT;
ALTER TABLE runs ADD COLUMN parent_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN parent_position INTEGER;
ALTER TABLE runs ADD COLUMN item INTEGER;
ALTER TABLE runs ADD COLUMN wait_events TEXT[];

-- RunChildren, held-child release and cancellation cascade: a parent's children by
-- group, in item order.
CREATE INDEX runs_children ON runs (parent_seq, parent_position, item)
    WHERE parent_seq IS NOT NULL;

-- Inboxes. seq is the send order. Every insert first locks its run's row, so per run
-- the seq order is also the commit order. An event is deleted when its run consumes
-- it; its payload lives on in the run's history.
CREATE TABLE events (
    seq     BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_seq BIGINT      NOT NULL,
    name    TEXT        NOT NULL,
    payload BYTEA,
    sent_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX events_inbox ON events (run_seq, name, seq);

-- Child groups: one row per op of a parent that started children. Counters are kept
-- by the store as children end, in the transaction that ends them (the row's lock
-- serialises the children of one group): active = released (pending or running) and
-- not finished, held = not yet released, next_item = the first item that may still
-- be held. ended is set once the group has ended (parent notified, or would have been
-- when detached).
CREATE TABLE child_groups (
    parent_seq      BIGINT  NOT NULL,
    position        INTEGER NOT NULL,
    max_concurrency INTEGER NOT NULL DEFAULT 0,
    fail_fast       BOOLEAN NOT NULL DEFAULT false,
    detached        BOOLEAN NOT NULL DEFAULT false,
    total           INTEGER NOT NULL,
    active          INTEGER NOT NULL,
    held            INTEGER NOT NULL,
    next_item       INTEGER NOT NULL,
    succeeded       INTEGER NOT NULL DEFAULT 0,
    failed          INTEGER NOT NULL DEFAULT 0,
    cancelled       INTEGER NOT NULL DEFAULT 0,
    ended           BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (parent_seq, position)
);

-- Approval requests. seq is the creation order (listing newest first, cursors).
CREATE TABLE approvals (
    seq        BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace  TEXT        NOT NULL,
    id         TEXT        NOT NULL,
    run_seq    BIGINT      NOT NULL,
    position   INTEGER     NOT NULL,
    name       TEXT        NOT NULL,
    approvers  TEXT[],
    subject    TEXT        NOT NULL DEFAULT '',
    details    BYTEA,
    status     TEXT        NOT NULL,
    principal  TEXT        NOT NULL DEFAULT '',
    comment    TEXT        NOT NULL DEFAULT '',
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ,
    decided_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX approvals_namespace_id ON approvals (namespace, id);
CREATE INDEX approvals_list ON approvals (namespace, seq);
CREATE INDEX approvals_run ON approvals (run_seq, seq);
