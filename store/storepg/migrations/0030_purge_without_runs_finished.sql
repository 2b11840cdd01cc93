-- The purge finds expired runs without an index of its own. runs_finished
-- (namespace, finished_at) took an entry at the end of every run, for a purge
-- that runs once a minute: about 3 % of Postgres' work in a job (docs/benchmarks.md).
-- RunsPurge now walks runs_status, each finished status from its oldest run, and
-- stops at the first run created after the cutoff (sqlstore.SQL.PurgeFind,
-- docs/retention.md).
DROP INDEX runs_finished;
