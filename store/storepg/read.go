package storepg

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// Reads run on the pool outside the writer: each is one statement, so it sees one
// committed state. What they share with SQLite's is in shared (sqlstore).

// sqlHistory returns one row: the run's sequence (NULL: no run) and its history.
var sqlHistory = `SELECT r.sequence, ` + historyJSON("r.sequence") + ` FROM (SELECT ` + refSeq + ` AS sequence) r`

// reads returns the pool as a sqlstore.Querier bound to ctx.
func (s *Store) reads(ctx context.Context) querier { return querier{ctx: ctx, c: s.pool} }

// runGetRaw implements (under RunGet, payloads.go) store.Store.
func (s *Store) runGetRaw(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	r, err := shared.Reads(readSource{s}).RunGet(ctx, p)
	return store.ExplainRun(ctx, s, p.Namespace, r, err)
}

// historyListRaw implements (under HistoryList, payloads.go) store.Store.
func (s *Store) historyListRaw(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
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

// readSource runs the shared reads (sqlstore.Reads) on the pool, retrying while
// the connection is being re-established.
type readSource struct{ s *Store }

// Read implements sqlstore.ReadSource.
func (r readSource) Read(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	if r.s.closed() {
		return store.ErrClosed
	}
	return r.s.readErr(r.s.read(ctx, func() error { return fn(r.s.reads(ctx)) }))
}

// RunCounts implements store.RunCounter.
func (s *Store) RunCounts(ctx context.Context, p *store.RunCountsParams) (*store.RunCountsResult, error) {
	return shared.Reads(readSource{s}).RunCounts(ctx, p)
}
