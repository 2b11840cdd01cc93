-- How a step attempt ended (store.Attempt.Outcome): failed, lost (its lease
-- expired while it ran), timed_out (the store ended it past its timeout plus a
-- grace), started (a durable record of its start, replaced by its end), or ''
-- for the row of the attempt that completed a step. Rows written before this
-- column hold '' and are read as failed when they have an error.
ALTER TABLE attempts ADD COLUMN outcome TEXT NOT NULL DEFAULT '';
