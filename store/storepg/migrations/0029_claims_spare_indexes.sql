-- Two index entries a run wrote that nothing reads. Postgres writes an entry in
-- every index of a row at each update that changes a column an index names, in
-- its key or its condition (no such update is HOT), unless the new row falls
-- outside a partial index's condition. A claim, each lease extension and a run's
-- end are such updates.
--
-- runs_status no longer holds running runs: neither the claim's new row nor a
-- lease extension's gets an entry there. Running runs are as many as the
-- workers' slots, not a backlog, and are counted and listed through
-- runs_running (sqlstore.Dialect.RunningApart, as SQLite's migration 0016).
DROP INDEX runs_status;
CREATE INDEX runs_status ON runs (namespace, status, sequence) WHERE status <> 'running';

-- runs_pending_available serves one question, when the next pending run not yet
-- due becomes due (sqlNextDue), so it holds only the pending runs that were not
-- due when they were created or made pending: available_at after created_at. A
-- run due at once (most of them: a create gives available_at and created_at the
-- same time) gets no entry. Every pending run due in the future is there: the
-- store's clock has passed its created_at.
DROP INDEX runs_pending_available;
CREATE INDEX runs_pending_available ON runs (namespace, available_at)
    WHERE status = 'pending' AND available_at > created_at;
