-- Retention (store.RunDeleter, docs/retention.md).

-- RunsPurge: the finished runs of a namespace, oldest first. Only finished runs
-- are in it, so running work never maintains it.
CREATE INDEX runs_finished ON runs (namespace, finished_at) WHERE finished_at IS NOT NULL;

-- An idempotency key whose response names a run (a start, a cancellation, a
-- resumption) records the run's sequence, so that deleting the run deletes the key.
ALTER TABLE idempotency_keys ADD COLUMN run_seq BIGINT;
CREATE INDEX idempotency_keys_run ON idempotency_keys (run_seq) WHERE run_seq IS NOT NULL;
