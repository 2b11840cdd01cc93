-- The web UI's runs page: counts per status (store.RunCounter) and lists filtered
-- by status, newest first, read this index instead of scanning the namespace.
CREATE INDEX runs_status ON runs (namespace, status, sequence);
