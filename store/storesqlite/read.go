package storesqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// readErr maps errors of the read pool after Close to store.ErrClosed.
func (s *Store) readErr(err error) error {
	if err != nil && s.closed() {
		return store.ErrClosed
	}
	return err
}

// runGetRaw implements (under RunGet, payloads.go) store.Store.
func (s *Store) runGetRaw(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	r, err := shared.Reads(readSource{s}).RunGet(ctx, p)
	return store.ExplainRun(ctx, s, p.Namespace, r, err)
}

// readQ returns the read pool as a sqlstore.Querier bound to ctx.
func (s *Store) readQ(ctx context.Context) sq { return sq{ctx: ctx, q: s.reads} }

// historyListRaw implements (under HistoryList, payloads.go) store.Store.
func (s *Store) historyListRaw(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	if s.closed() {
		return nil, fmt.Errorf("listing history: %w", store.ErrClosed)
	}
	ops, err := s.historyList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("listing history: %w", s.readErr(err))
	}
	return ops, nil
}

func (s *Store) historyList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	// One read transaction, so the ops and attempts are of the same commit.
	tx, err := s.readDB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	var seq sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT `+refSeq, p.Namespace, p.Ref).Scan(&seq); err != nil {
		return nil, err
	}
	if !seq.Valid {
		return nil, store.RunNotFound(p.Namespace, p.Ref)
	}
	return history(ctx, sqlTx{tx}, seq.Int64)
}

// sqlTx adapts a read transaction to querier.
type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) QueryContext(ctx context.Context, query string, args ...any) (rowsIter, error) {
	return t.tx.QueryContext(ctx, query, args...)
}

func (t sqlTx) QueryRowContext(ctx context.Context, query string, args ...any) scanner {
	return t.tx.QueryRowContext(ctx, query, args...)
}

// kvGetRaw implements (under KVGet, payloads.go) store.Store.
func (s *Store) kvGetRaw(ctx context.Context, p *store.KVGetParams) ([]byte, error) {
	return shared.Reads(readSource{s}).KVGet(ctx, p)
}

// streamReadRaw implements (under StreamRead, payloads.go) store.Store.
func (s *Store) streamReadRaw(ctx context.Context, p *store.StreamReadParams) (*store.StreamReadResult, error) {
	return shared.Reads(readSource{s}).StreamRead(ctx, p)
}

// runListRaw implements (under RunList, payloads.go) store.Store.
func (s *Store) runListRaw(ctx context.Context, p *store.RunListParams) (*store.RunListResult, error) {
	res, err := shared.Reads(readSource{s}).RunList(ctx, p)
	return store.ExplainPage(ctx, s, p.Namespace, res, err)
}

// readSource runs the shared reads (sqlstore.Reads) on the read pool.
type readSource struct{ s *Store }

// Read implements sqlstore.ReadSource.
func (r readSource) Read(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	if r.s.closed() {
		return store.ErrClosed
	}
	return r.s.readErr(fn(r.s.readQ(ctx)))
}

// RunCounts implements store.RunCounter.
func (s *Store) RunCounts(ctx context.Context, p *store.RunCountsParams) (*store.RunCountsResult, error) {
	return shared.Reads(readSource{s}).RunCounts(ctx, p)
}
