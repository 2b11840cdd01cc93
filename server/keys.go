package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/secrets"
	"github.com/trellis-dev/trellis/store"
)

// loadKeys reads the keys every server of the store shares (making the root
// one on the store's first server start): lease secrets are signed with one,
// so that a worker's next write may go through another server of the store,
// or through this one after a restart, and page tokens sealed with another.
//
// Reading them is a write (the first server keeps its fresh key), which a
// store whose writer is changing fails for a moment: a server of a
// JetStream cluster restarted while another takes over writing the log
// forwarded it to the writer that had just died. It keeps the key there or
// the one given, so it is tried again, for up to keysPatience.
func (s *Server) loadKeys(ctx context.Context) error {
	deadline := time.Now().Add(keysPatience)
	wait := 100 * time.Millisecond
	for {
		keys, err := secrets.Load(ctx, s.store)
		if err == nil {
			s.leaseKeys = keys.Leases()
			if s.pageAEAD, err = newPageCipher(keys); err != nil {
				return fmt.Errorf("starting server: %w", err)
			}
			return nil
		}
		if !keysRetryable(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("starting server: %w", err)
		}
		s.cfg.Logger.Warn("starting server: reading the server keys failed; trying again", "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("starting server: %w", err)
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// keysPatience is how long loadKeys tries again (a variable for tests).
var keysPatience = 30 * time.Second

// keysRetryable: the store refused the read for a reason that will not pass.
func keysRetryable(err error) bool {
	for _, final := range []error{store.ErrInvalidParams, store.ErrClosed, store.ErrNoStore, store.ErrStorageFull} {
		if errors.Is(err, final) {
			return false
		}
	}
	return true
}
