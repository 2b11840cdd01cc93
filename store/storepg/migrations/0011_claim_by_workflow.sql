-- Claim for a worker that serves only some workflows. runs_pending walks the
-- namespace's pending runs in claim order and filters by workflow: cheap when the
-- worker serves the runs at the front, but a worker that serves a workflow with few
-- pending runs beside another's backlog of 100,000 walked (or scanned) them all,
-- 50 ms per claim. With this index the planner reads just that workflow's pending
-- runs. (SQLite's runs_pending leads with the workflow already: it claims per
-- workflow.)
CREATE INDEX runs_pending_workflow ON runs (namespace, workflow, priority DESC, available_at, sequence)
    WHERE status = 'pending';
