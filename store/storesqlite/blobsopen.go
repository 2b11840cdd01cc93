package storesqlite

import (
	"context"
	"database/sql"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// RunCreateTx implements store.TxStarter. Payloads stored apart in the table
// are written in tx too (the writer's connection would wait for tx's lock).
func (s *Store) RunCreateTx(ctx context.Context, tx any, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	ap := s.Payloads()
	if stx, ok := tx.(*sql.Tx); ok && !sqlstore.InObjectStore(&s.methods) && ap != nil {
		in := &sqlstore.TableBlobs{SQL: shared, Read: seam{s}.Read,
			Write: func(ctx context.Context, fn func(tx sqlstore.Tx) error) error {
				return fn(&wtx{w: s.w, now: s.now().UTC(), ext: stx, ctx: ctx})
			}}
		ap = blobs.New(in, ap.Threshold())
	}
	return sqlstore.RunCreateTx(&s.methods, ctx, ap, p, func(q *store.RunCreateParams) (*store.RunCreateResult, error) {
		return s.runCreateTxRaw(ctx, tx, q)
	})
}
