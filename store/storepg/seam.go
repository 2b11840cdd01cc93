package storepg

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
// transactions (sqlstore.Driver: the pool, transactions of their own beside the
// group-commit writer) and what it writes on its own (sqlstore.Own).
type seam struct{ s *Store }

var (
	_ sqlstore.Driver = seam{}
	_ sqlstore.Own    = seam{}
)

// Read implements sqlstore.Driver: on the pool, retrying while the connection
// is being re-established.
func (d seam) Read(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	if d.s.closed() {
		return store.ErrClosed
	}
	return d.s.readErr(d.s.read(ctx, func() error { return fn(d.s.reads(ctx)) }))
}

// Write implements sqlstore.Driver: a transaction of its own on the pool
// (inTx), run again after a deadlock.
func (d seam) Write(ctx context.Context, fn func(tx sqlstore.Tx) error) error {
	return d.s.inTx(ctx, func(tx *wtx) error { return fn(stx{tx}) })
}

// WriteNoSync implements sqlstore.Driver: Write (the commit waits for the
// server's WAL flush as the server's settings say).
func (d seam) WriteNoSync(ctx context.Context, fn func(tx sqlstore.Tx) error) error {
	return d.Write(ctx, fn)
}

// Admit implements sqlstore.Driver: Postgres keeps no disk reserve of its own.
func (d seam) Admit() error { return nil }

// Now implements sqlstore.Driver.
func (d seam) Now() time.Time { return d.s.now() }

// RunCreateIn implements sqlstore.Own: tx is an stx of Write. The run is
// created in a transaction of the waiting path (txn.go), signalling the workers
// when it commits.
func (d seam) RunCreateIn(tx sqlstore.Tx, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	wt := tx.(stx).tx
	st, cr, err := d.s.runCreateStmt(p)
	if err != nil {
		return nil, err
	}
	res := cr.res
	if err := runInTx(wt.ctx, wt.Tx, "", st); err != nil {
		return nil, err
	}
	if *res == nil {
		return nil, store.RunExistsError(p.ID, p.WorkflowID, store.ReuseRejectActive)
	}
	wt.publish(store.RunTopic(p.Namespace, p.ID), store.TopicReady)
	return *res, nil
}
