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

// HistoryList implements sqlstore.Own: store.Store's HistoryList, under the payloads stored apart.
func (d seam) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	s := d.s
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
		return nil, fmt.Errorf("listing history: %w", store.RunNotFound(p.Namespace, p.Ref))
	}
	ops, err := decodeHistory(hist)
	if err != nil {
		return nil, fmt.Errorf("listing history: %w", err)
	}
	return ops, nil
}
