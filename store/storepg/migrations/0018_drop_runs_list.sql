-- Drop runs_list (namespace, sequence). Postgres writes an entry in every
-- index of a row at each update that cannot stay on its page without one (a
-- change of status never can: the status is indexed), so each index costs
-- every run an entry at its creation, its claim, its end and each wait. A list
-- of runs of any status now reads each status through runs_status (namespace,
-- status, sequence), newest first, and merges them (sqlstore.Dialect's
-- ListsByStatus). w5, 40,000 jobs: 5 % less Postgres CPU per job.
DROP INDEX IF EXISTS runs_list;
