-- Tokens that expire, rotate and map client certificates (store.TokenStore,
-- docs/security.md). Times are unix nanoseconds, durations nanoseconds.
--   expires_at      when the current secret stops working; NULL: never.
--   ttl             the lifetime the token was created with: a rotation gives
--                   the new secret as long again from its time; NULL: never.
--   last_used_at    the last authentication by it, recorded at most once a
--                   minute per server (TokenTouch).
--   rotated_at      the time of its last rotation.
--   prev_hash       the hash of the secret before the last rotation, which keeps
--   prev_expires_at working until prev_expires_at (the grace).
--   subject         the Subject (RFC 2253) of the client certificates that act
--                   as this token under mutual TLS; unique among live tokens.
ALTER TABLE tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE tokens ADD COLUMN ttl INTEGER;
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER;
ALTER TABLE tokens ADD COLUMN rotated_at INTEGER;
ALTER TABLE tokens ADD COLUMN prev_hash BLOB;
ALTER TABLE tokens ADD COLUMN prev_expires_at INTEGER;
ALTER TABLE tokens ADD COLUMN subject TEXT;
CREATE INDEX tokens_prev_hash ON tokens (prev_hash) WHERE prev_hash IS NOT NULL;
CREATE UNIQUE INDEX tokens_subject ON tokens (subject) WHERE subject IS NOT NULL AND revoked_at IS NULL;
