package storepg

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/store"
)

// Reads run on the pool outside the writer: each is one statement, so it sees one
// committed state.
var (
	sqlRunByRef = `SELECT ` + runCols + ` FROM runs WHERE sequence = ` + refSeq
	// sqlHistory returns one row: the run's sequence (NULL: no run) and its history.
	sqlHistory = `SELECT r.sequence, ` + historyJSON("r.sequence") + ` FROM (SELECT ` + refSeq + ` AS sequence) r`
	// sqlKVGet returns one row: the run's sequence (NULL: no run), the value, and
	// whether the key exists.
	sqlKVGet = `SELECT r.sequence, kv.value, kv.key IS NOT NULL
	FROM (SELECT ` + refSeq + ` AS sequence) r
	LEFT JOIN kv ON kv.run_seq = r.sequence AND kv.key = $3`
)

// RunGet implements store.Store.
func (s *Store) RunGet(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	if s.closed() {
		return nil, fmt.Errorf("getting run: %w", store.ErrClosed)
	}
	var r *store.Run
	err := s.read(ctx, func() (err error) {
		r, _, err = scanRun(s.pool.QueryRow(ctx, sqlRunByRef, p.Namespace, p.Ref))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("getting run: %w", notFound(p.Namespace, p.Ref))
	}
	if err == nil {
		err = store.ExplainPending(ctx, s, p.Namespace, r)
	}
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
	var (
		seq   *int64
		value []byte
		found *bool
	)
	err := s.read(ctx, func() error {
		return s.pool.QueryRow(ctx, sqlKVGet, p.Namespace, p.Ref, p.Key).Scan(&seq, &value, &found)
	})
	if err != nil {
		return nil, fmt.Errorf("getting key: %w", s.readErr(err))
	}
	switch {
	case seq == nil:
		return nil, fmt.Errorf("getting key: %w", notFound(p.Namespace, p.Ref))
	case found == nil || !*found:
		return nil, fmt.Errorf("getting key %q: %w", p.Key, store.ErrKeyNotFound)
	}
	return nonNil(value), nil
}

// RunList implements store.Store.
func (s *Store) RunList(ctx context.Context, p *store.RunListParams) (*store.RunListResult, error) {
	if s.closed() {
		return nil, fmt.Errorf("listing runs: %w", store.ErrClosed)
	}
	query, args, limit, err := runListQuery(p)
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	var runs []*store.Run
	if err := s.read(ctx, func() (err error) {
		runs, err = s.queryRuns(ctx, query, args)
		return err
	}); err != nil {
		return nil, fmt.Errorf("listing runs: %w", s.readErr(err))
	}
	res := &store.RunListResult{}
	res.Runs, res.NextCursor = store.Page(runs, limit, func(r *store.Run) int64 { return r.Sequence })
	if err := store.ExplainPending(ctx, s, p.Namespace, res.Runs...); err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	return res, nil
}

// runListQuery builds the query of one page (limit+1 rows, to see if more follow).
func runListQuery(p *store.RunListParams) (string, []any, int, error) {
	limit, err := store.ListLimit(p.Limit)
	if err != nil {
		return "", nil, 0, err
	}
	var args argList
	where := []string{"namespace = " + args.add(p.Namespace)}
	if len(p.Statuses) > 0 {
		sts := make([]string, len(p.Statuses))
		for i, st := range p.Statuses {
			if !st.Valid() {
				return "", nil, 0, fmt.Errorf("%w: Statuses: unknown status %q", store.ErrInvalidParams, st)
			}
			sts[i] = string(st)
		}
		where = append(where, "status = ANY("+args.add(sts)+"::text[])")
	}
	if p.Workflow != "" {
		where = append(where, "workflow = "+args.add(p.Workflow))
	}
	if p.WorkflowID != "" {
		where = append(where, "workflow_id = "+args.add(p.WorkflowID))
	}
	if !p.CreatedAfter.IsZero() {
		where = append(where, "created_at >= "+args.add(p.CreatedAfter)+"::timestamptz")
	}
	if !p.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+args.add(p.CreatedBefore)+"::timestamptz")
	}
	after, err := store.ParseCursor(p.Cursor)
	if err != nil {
		return "", nil, 0, err
	}
	if after > 0 {
		where = append(where, "sequence < "+args.add(after))
	}
	query := `SELECT ` + runCols + ` FROM runs WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY sequence DESC LIMIT ` + args.add(limit+1)
	return query, args, limit, nil
}

func (s *Store) queryRuns(ctx context.Context, query string, args []any) ([]*store.Run, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	runs := []*store.Run{}
	for rows.Next() {
		r, _, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, rows.Err()
}
