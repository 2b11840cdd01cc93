-- Whether a run was ever sent an event. A claim returns each run with its inbox
-- (its events not yet consumed), a probe of events_inbox per run: a sixth of a
-- claim's time when working jobs, which are never sent events. The flag is set in
-- the transaction that first adds an event for the run (EventSend, and the
-- store's own events through sqlstore.Deliver) and never cleared, so a claim
-- reads the inbox only of runs that have had one. Not indexed: setting it can be
-- a HOT update.
ALTER TABLE runs ADD COLUMN has_events boolean NOT NULL DEFAULT false;
UPDATE runs SET has_events = true WHERE sequence IN (SELECT run_seq FROM events);
