package server

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/internal/secrets"
)

// loadKeys reads the keys every server of the store shares (making the root
// one on the store's first server start): lease secrets are signed with one,
// so that a worker's next write may go through another server of the store,
// or through this one after a restart.
func (s *Server) loadKeys(ctx context.Context) error {
	keys, err := secrets.Load(ctx, s.store)
	if err != nil {
		return fmt.Errorf("starting server: %w", err)
	}
	s.keys, s.leaseKeys = keys, keys.Leases()
	return nil
}

// derivedKey returns the 32-byte key of label, the same on every server of the
// store (secrets.Keys.Derive).
func (s *Server) derivedKey(label string) []byte {
	return s.keys.Derive(label)
}
