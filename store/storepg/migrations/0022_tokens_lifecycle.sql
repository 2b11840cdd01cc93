-- Tokens that expire, rotate and map client certificates: the same columns as
-- SQLite's 0022_tokens_lifecycle.sql (which says what each holds), in Postgres
-- types; ttl is nanoseconds.
ALTER TABLE tokens ADD COLUMN expires_at TIMESTAMPTZ;
ALTER TABLE tokens ADD COLUMN ttl BIGINT;
ALTER TABLE tokens ADD COLUMN last_used_at TIMESTAMPTZ;
ALTER TABLE tokens ADD COLUMN rotated_at TIMESTAMPTZ;
ALTER TABLE tokens ADD COLUMN prev_hash BYTEA;
ALTER TABLE tokens ADD COLUMN prev_expires_at TIMESTAMPTZ;
ALTER TABLE tokens ADD COLUMN subject TEXT;
CREATE INDEX tokens_prev_hash ON tokens (prev_hash) WHERE prev_hash IS NOT NULL;
CREATE UNIQUE INDEX tokens_subject ON tokens (subject) WHERE subject IS NOT NULL AND revoked_at IS NULL;
