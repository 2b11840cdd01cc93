-- The step a running run is executing, as its worker's lease heartbeat last
-- reported it (JSON: name, attempt, since, and the lease token it was reported
-- under, so that a later lease does not show an earlier worker's step). NULL
-- when none. Written only by the heartbeat: a step costs no write of its own.
ALTER TABLE runs ADD COLUMN current_step TEXT;
