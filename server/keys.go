package server

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/internal/secrets"
)

// loadKeys reads the keys every server of the store shares (making the root
// one on the store's first server start): lease secrets are signed with one,
// so that a worker's next write may go through another server of the store,
// or through this one after a restart, and page tokens sealed with another.
func (s *Server) loadKeys(ctx context.Context) error {
	keys, err := secrets.Load(ctx, s.store)
	if err != nil {
		return fmt.Errorf("starting server: %w", err)
	}
	s.leaseKeys = keys.Leases()
	if s.pageAEAD, err = newPageCipher(keys); err != nil {
		return fmt.Errorf("starting server: %w", err)
	}
	return nil
}
