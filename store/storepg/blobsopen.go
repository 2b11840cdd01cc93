package storepg

import (
	"context"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// RunCreateTx implements store.TxStarter. Payloads stored apart are written
// before, on the pool: a rolled-back tx leaves them until a purge of their run.
func (s *Store) RunCreateTx(ctx context.Context, tx any, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	return sqlstore.RunCreateTx(&s.methods, ctx, s.Payloads(), p, func(q *store.RunCreateParams) (*store.RunCreateResult, error) {
		return s.runCreateTxRaw(ctx, tx, q)
	})
}
