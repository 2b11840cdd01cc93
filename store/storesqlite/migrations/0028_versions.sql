-- A version per start (store.Run.Pinned): pin_version is the version a run is
-- pinned to, 0 for a run that any worker of its workflow may claim. The claim
-- filters on it, so runs_pending carries it: the claim reads no table row for
-- the runs it passes over, as for their queue and concurrency key.
ALTER TABLE runs ADD COLUMN pin_version INTEGER NOT NULL DEFAULT 0;
DROP INDEX runs_pending;
CREATE INDEX runs_pending ON runs (namespace, workflow, priority DESC, available_at, sequence, queue, concurrency_key, pin_version)
    WHERE status = 'pending';

-- The workflow versions a worker serves to pinned runs (store.Worker.Versions):
-- a JSON object of workflow name to a list of versions.
ALTER TABLE workers ADD COLUMN versions TEXT NOT NULL DEFAULT '{}';
