-- The purge finds expired runs without an index of its own. runs_finished
-- (namespace, finished_at) took an entry at the end of every run, for a purge
-- that runs once a minute. RunsPurge now walks runs_status, each finished status
-- from its oldest run, and stops at the first run created after the cutoff
-- (sqlstore.SQL.PurgeFind, docs/retention.md). As Postgres' migration 0030.
DROP INDEX runs_finished;
