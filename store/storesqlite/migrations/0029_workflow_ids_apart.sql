-- Index workflow IDs only where they say more than the run ID, as Postgres does
-- since its migration 0019. A run started without a workflow ID takes its run ID
-- as workflow ID (workflow_id = id): runs_namespace_id already finds it by
-- either, and its run ID, unique and fresh, keeps it the only active run with
-- that workflow ID. Most jobs are such runs. SQLite leaves an index alone when an
-- update changes none of its columns, so a claim never touched these two; but a
-- create wrote an entry in each and a run's end deleted its entry from
-- runs_active_workflow_id (finished_at is in its condition): two of a job's six
-- index entries at its creation, one of four at its end.
--
-- Readers follow (sqlstore.Dialect.WorkflowIDIs): the runs with workflow ID W
-- are those with workflow_id = W AND workflow_id <> id, found here, and the one
-- with id = W AND workflow_id = id, found by runs_namespace_id. A start with
-- workflow ID W while a run started without one, whose ID is W, is unfinished is
-- refused by a check of its own (storesqlite: implicitTaken) in the transaction
-- that would insert it; the single writer makes that check and the insert one
-- step.
DROP INDEX runs_workflow_id;
CREATE INDEX runs_workflow_id ON runs (namespace, workflow_id, sequence) WHERE workflow_id <> id;
DROP INDEX runs_active_workflow_id;
CREATE UNIQUE INDEX runs_active_workflow_id ON runs (namespace, workflow_id)
    WHERE finished_at IS NULL AND workflow_id <> id;
