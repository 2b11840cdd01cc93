package storesqlite

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// The ended UI sessions are written once, in sqlstore (sessions.go); these are
// their entry points.

// SessionEnd implements store.SessionStore.
func (s *Store) SessionEnd(ctx context.Context, p *store.SessionEndParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("ending session: %w", err)
	}
	if err := s.write(ctx, func(tx *wtx) error { return shared.SessionEnd(tx, p) }); err != nil {
		return fmt.Errorf("ending session: %w", err)
	}
	return nil
}

// SessionEnded implements store.SessionStore.
func (s *Store) SessionEnded(ctx context.Context, p *store.SessionEndedParams) (bool, error) {
	return shared.Reads(readSource{s}).SessionEnded(ctx, p)
}

// SessionsPurge implements store.SessionStore. Losing a purge in a crash is
// harmless (the next one deletes the same rows), so it commits without fsync.
func (s *Store) SessionsPurge(ctx context.Context, p *store.SessionsPurgeParams) (int, error) {
	var n int
	err := s.writeNoSync(ctx, func(tx *wtx) (err error) {
		n, err = shared.SessionsPurge(tx, p.Limit)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purging ended sessions: %w", err)
	}
	return n, nil
}
