package storesqlite

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// Idempotency keys are written once, in sqlstore (idempotency.go); RunCreate and
// EventSend record theirs in their own transaction.

// IdempotencyGet implements store.IdempotencyStore.
func (s *Store) IdempotencyGet(ctx context.Context, p *store.IdempotencyGetParams) (*store.IdempotencyEntry, error) {
	return shared.Reads(readSource{s}).IdempotencyGet(ctx, p, s.now())
}

// IdempotencyPurge implements store.IdempotencyStore. Losing a purge in a crash
// is harmless (the next one deletes the same rows), so it commits without fsync.
func (s *Store) IdempotencyPurge(ctx context.Context, p *store.IdempotencyPurgeParams) (int, error) {
	var n int
	err := s.writeNoSync(ctx, func(tx *wtx) (err error) {
		n, err = shared.IdempotencyPurge(tx, p.Limit)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purging idempotency keys: %w", err)
	}
	return n, nil
}
