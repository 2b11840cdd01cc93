-- A run's workflow ID is taken while the run is unfinished. The unique index
-- that says so now tells unfinished runs by finished_at, which is set exactly
-- when a run ends (a finished run never starts again), instead of by status:
-- SQLite updates a partial index whenever a column of its WHERE clause changes,
-- so every claim (pending to running) deleted and re-inserted the run's entry.
-- Working one-step jobs (w5), the writer spent about a tenth of its time on it.
-- (Postgres keeps its index by status: an update that changes the status
-- writes every index entry anew there anyway.)
-- Every finished run has had its finished_at since the first schema; the
-- update makes sure before the unique index is built.
UPDATE runs SET finished_at = updated_at
    WHERE finished_at IS NULL AND status IN ('succeeded', 'failed', 'cancelled');
DROP INDEX runs_active_workflow_id;
CREATE UNIQUE INDEX runs_active_workflow_id ON runs (namespace, workflow_id)
    WHERE finished_at IS NULL;
