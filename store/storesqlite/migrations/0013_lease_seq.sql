-- The idempotency key of a lease's writes (store.CheckpointParams.Seq): the
-- sequence number of the last checkpoint or release applied under the run's
-- current lease token, and the fingerprint of its request (0: none). A claim
-- resets both; the fenced update that applies a write sets them, so a retry of
-- that write after its answer was lost is recognised and not applied again.
ALTER TABLE runs ADD COLUMN lease_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN lease_fp INTEGER NOT NULL DEFAULT 0;
