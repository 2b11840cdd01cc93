package storesqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// readErr maps errors of the read pool after Close to store.ErrClosed.
func (s *Store) readErr(err error) error {
	if err != nil && s.closed() {
		return store.ErrClosed
	}
	return err
}

// readQ returns the read pool as a sqlstore.Querier bound to ctx.
func (s *Store) readQ(ctx context.Context) sq { return sq{ctx: ctx, q: s.reads} }

// HistoryList implements sqlstore.Own: store.Store's HistoryList, under the payloads stored apart.
func (d seam) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	s := d.s
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
