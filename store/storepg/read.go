package storepg

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// Reads run on the pool outside the writer: each is one statement, so it sees one
// committed state. What they share with SQLite's is in shared (sqlstore).

// sqlHistory returns one row: the run's sequence (NULL: no run) and its history.
var sqlHistory = `SELECT r.sequence, ` + historyJSON("r.sequence") + ` FROM (SELECT ` + refSeq + ` AS sequence) r`

// reads returns the pool as a sqlstore.Querier bound to ctx.
func (s *Store) reads(ctx context.Context) querier { return querier{ctx: ctx, c: s.pool} }

// RunGet implements store.Store.
func (s *Store) RunGet(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	if s.closed() {
		return nil, fmt.Errorf("getting run: %w", store.ErrClosed)
	}
	var r *store.Run
	err := s.read(ctx, func() (err error) {
		r, err = shared.RunByRef(s.reads(ctx), p.Namespace, p.Ref)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting run: %w", s.readErr(err))
	}
	return r, nil
}

// HistoryList implements store.Store.
func (s *Store) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	if s.closed() {
		return nil, fmt.Errorf("listing history: %w", store.ErrClosed)
	}
	var (
		seq  *int64
		hist []byte
	)
	err := s.read(ctx, func() error {
		return s.pool.QueryRow(ctx, sqlHistory, p.Namespace, p.Ref).Scan(&seq, &hist)
	})
	if err != nil {
		return nil, fmt.Errorf("listing history: %w", s.readErr(err))
	}
	if seq == nil {
		return nil, fmt.Errorf("listing history: %w", notFound(p.Namespace, p.Ref))
	}
	ops, err := decodeHistory(hist)
	if err != nil {
		return nil, fmt.Errorf("listing history: %w", err)
	}
	return ops, nil
}

// KVGet implements store.Store.
func (s *Store) KVGet(ctx context.Context, p *store.KVGetParams) ([]byte, error) {
	if s.closed() {
		return nil, fmt.Errorf("getting key: %w", store.ErrClosed)
	}
	var v []byte
	err := s.read(ctx, func() (err error) {
		v, err = shared.KVGet(s.reads(ctx), p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("getting key: %w", s.readErr(err))
	}
	return v, nil
}

// RunList implements store.Store.
func (s *Store) RunList(ctx context.Context, p *store.RunListParams) (*store.RunListResult, error) {
	if s.closed() {
		return nil, fmt.Errorf("listing runs: %w", store.ErrClosed)
	}
	var res *store.RunListResult
	err := s.read(ctx, func() (err error) {
		res, err = shared.RunList(s.reads(ctx), p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", s.readErr(err))
	}
	return res, nil
}
