-- Workflow retries (store/retry.go): a run's retry policy and its failed
-- attempts, as one JSON document (store.RetryState). NULL for a run started
-- without a policy that has not been retried: what almost every run holds, so
-- reading it costs nothing.
ALTER TABLE runs ADD COLUMN retry TEXT;
