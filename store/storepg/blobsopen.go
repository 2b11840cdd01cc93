package storepg

import (
	"context"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// openObjectBlobs opens the object store of Config.Blobs (nil when none): Open
// does it first, so that a bad URL or an unreachable object store changes
// nothing.
func openObjectBlobs(ctx context.Context, cfg Config) (blobs.Backend, error) {
	if cfg.Blobs == "" {
		return nil, nil
	}
	return blobs.Open(ctx, cfg.Blobs)
}

// RunCreateTx implements store.TxStarter. Payloads stored apart are written
// before, on the pool: a rolled-back tx leaves them until a purge of their run.
func (s *Store) RunCreateTx(ctx context.Context, tx any, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	return sqlstore.RunCreateTx(&s.methods, ctx, s.Payloads(), p, func(q *store.RunCreateParams) (*store.RunCreateResult, error) {
		return s.runCreateTxRaw(ctx, tx, q)
	})
}
