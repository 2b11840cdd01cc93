-- The W3C trace context (a traceparent header, e.g. "00-<trace>-<span>-01") of
-- the call that started a run, so that every execution of the run, on any
-- worker and after any crash, joins that trace. Empty when the start carried none.
ALTER TABLE runs ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';
