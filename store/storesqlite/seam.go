package storesqlite

import (
	"context"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// methods are the store methods the SQL drivers share (sqlstore.Methods),
// embedded in Store under an unexported name.
type methods = sqlstore.Methods

// seam is the store as the shared methods see it: how they enter its
// transactions (sqlstore.Driver: the read pool, the writer) and what it writes
// on its own (sqlstore.Own).
type seam struct{ s *Store }

var (
	_ sqlstore.Driver = seam{}
	_ sqlstore.Own    = seam{}
)

// Read implements sqlstore.Driver: on the read pool.
func (d seam) Read(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	if d.s.closed() {
		return store.ErrClosed
	}
	return d.s.readErr(fn(d.s.readQ(ctx)))
}

// Write implements sqlstore.Driver: a request of the writer, committed with the
// others of its batch.
func (d seam) Write(ctx context.Context, fn func(tx sqlstore.Tx) error) error {
	return d.s.write(ctx, func(tx *wtx) error { return fn(tx) })
}

// WriteNoSync implements sqlstore.Driver: a request that does not make its
// batch wait for fsync (writeNoSync).
func (d seam) WriteNoSync(ctx context.Context, fn func(tx sqlstore.Tx) error) error {
	return d.s.writeNoSync(ctx, func(tx *wtx) error { return fn(tx) })
}

// Admit implements sqlstore.Driver: the disk reserve's verdict.
func (d seam) Admit() error { return d.s.reserve.Load().admit() }

// Now implements sqlstore.Driver.
func (d seam) Now() time.Time { return d.s.now() }

// RunCreateIn implements sqlstore.Own: tx is a *wtx of Write.
func (d seam) RunCreateIn(tx sqlstore.Tx, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	return runCreate(tx.(*wtx), p)
}
