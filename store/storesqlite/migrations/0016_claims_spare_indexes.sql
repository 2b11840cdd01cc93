-- A claim (pending to running) and a run's end (running to a final status) each
-- updated two index entries that nothing reads. SQLite deletes a row's entry of a
-- partial index, and inserts the new one, only where the row meets the index's
-- condition before, and after, the update; it still seeks the entry each time.
--
-- runs_status no longer holds running runs: a claim deletes the pending run's
-- entry and inserts none, and the run's end inserts its final entry and deletes
-- none. Running runs are counted through runs_running (sqlstore.RunCounts names
-- each index's condition; a list by status reads runs_list either way). Running
-- runs are as many as workers have slots, not a backlog.
DROP INDEX runs_status;
CREATE INDEX runs_status ON runs (namespace, status, sequence) WHERE status <> 'running';

-- runs_pending_available serves one question, when the next pending run not yet
-- due becomes due (sqlNextDue), so it holds only the pending runs that were not
-- due when they were created or made pending: available_at after created_at. A
-- run due at once (most of them) is neither inserted nor, at its claim, deleted.
-- Every pending run due in the future is there: the store's clock has passed its
-- created_at.
DROP INDEX runs_pending_available;
CREATE INDEX runs_pending_available ON runs (namespace, available_at)
    WHERE status = 'pending' AND available_at > created_at;
