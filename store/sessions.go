package store

import (
	"context"
	"fmt"
	"time"
)

// SessionStore records the web UI's sessions that were ended (signed out)
// before they expire (docs/ui.md, Sessions). A session is a sealed cookie the
// store never sees; when its user signs out, the server records the session's
// ID until the cookie's own expiry, so that a copy of the cookie replayed
// later is refused by every server of the store. The records are purged once
// their expiry has passed: the cookie is refused for its age by then.
type SessionStore interface {
	// SessionEnd records session p.ID as ended until p.ExpiresAt. Ending an
	// ended session changes nothing.
	SessionEnd(ctx context.Context, p *SessionEndParams) error
	// SessionEnded reports whether session p.ID was ended (and its record not
	// purged yet).
	SessionEnded(ctx context.Context, p *SessionEndedParams) (bool, error)
	// SessionsPurge deletes up to Limit records whose ExpiresAt has passed (by
	// the store's clock) and returns how many it deleted; a server calls it in
	// the background until it returns fewer than Limit.
	SessionsPurge(ctx context.Context, p *SessionsPurgeParams) (int, error)
}

// Sizes of a session ID.
const (
	MinSessionIDSize = 16
	MaxSessionIDSize = 64
)

// SessionEndParams are the parameters of SessionEnd.
type SessionEndParams struct {
	// ID is the session's random ID (MinSessionIDSize to MaxSessionIDSize bytes).
	ID []byte
	// ExpiresAt is when the session would have expired: its record is kept
	// until then.
	ExpiresAt time.Time
}

// Validate reports the first missing or malformed field of p, wrapping
// ErrInvalidParams.
func (p *SessionEndParams) Validate() error {
	if err := validateSessionID(p.ID); err != nil {
		return err
	}
	if p.ExpiresAt.IsZero() {
		return fmt.Errorf("%w: ExpiresAt is required", ErrInvalidParams)
	}
	return nil
}

// SessionEndedParams are the parameters of SessionEnded.
type SessionEndedParams struct {
	ID []byte
}

// Validate reports a malformed ID, wrapping ErrInvalidParams.
func (p *SessionEndedParams) Validate() error { return validateSessionID(p.ID) }

func validateSessionID(id []byte) error {
	if len(id) < MinSessionIDSize || len(id) > MaxSessionIDSize {
		return fmt.Errorf("%w: ID must be %d to %d bytes, not %d", ErrInvalidParams, MinSessionIDSize, MaxSessionIDSize, len(id))
	}
	return nil
}

// SessionsPurgeParams are the parameters of SessionsPurge.
type SessionsPurgeParams struct {
	// Limit caps the records deleted (0: 1000; at most MaxPurgeBatch).
	Limit int
}
