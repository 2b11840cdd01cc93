-- A claim (pending to running) and a run's end (running to a final status) each
-- wrote index entries that nothing reads. For each index an update touches, by
-- its columns or its condition, SQLite deletes the row's old entry when the old
-- row met the index's condition and inserts a new one when the new row does: a
-- seek in the index each, even when the key does not change.
--
-- runs_status no longer holds running runs: a claim deletes the pending run's
-- entry and inserts none, and the run's end inserts its final entry and deletes
-- none. Running runs are counted, and listed, through runs_running: they are as
-- many as workers have slots, not a backlog (sqlstore.CountQuery and RunListQuery
-- name each partial index's condition, without which SQLite does not read it).
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
