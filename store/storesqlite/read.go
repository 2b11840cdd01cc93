package storesqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// readErr maps errors of the read pool after Close to store.ErrClosed.
func (s *Store) readErr(err error) error {
	if err != nil && s.closed() {
		return store.ErrClosed
	}
	return err
}

// RunGet implements store.Store.
func (s *Store) RunGet(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	if s.closed() {
		return nil, fmt.Errorf("getting run: %w", store.ErrClosed)
	}
	r, err := runByRef(ctx, s.reads, p.Namespace, p.Ref)
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
		return nil, fmt.Errorf("%w: %q in namespace %q", store.ErrRunNotFound, p.Ref, p.Namespace)
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

// sqlKVGet returns one row: the run's sequence (NULL: no run), the value, and
// whether the key exists.
const sqlKVGet = `SELECT r.sequence, kv.value, kv.key IS NOT NULL
	FROM (SELECT ` + refSeq + ` AS sequence) r
	LEFT JOIN kv ON kv.run_seq = r.sequence AND kv.key = ?3`

// KVGet implements store.Store.
func (s *Store) KVGet(ctx context.Context, p *store.KVGetParams) ([]byte, error) {
	if s.closed() {
		return nil, fmt.Errorf("getting key: %w", store.ErrClosed)
	}
	var (
		seq   sql.NullInt64
		value []byte
		found sql.NullBool
	)
	row := s.reads.QueryRowContext(ctx, sqlKVGet, p.Namespace, p.Ref, p.Key)
	if err := row.Scan(&seq, &value, &found); err != nil {
		return nil, fmt.Errorf("getting key: %w", s.readErr(err))
	}
	switch {
	case !seq.Valid:
		return nil, fmt.Errorf("getting key: %w: %q in namespace %q", store.ErrRunNotFound, p.Ref, p.Namespace)
	case !found.Bool:
		return nil, fmt.Errorf("getting key %q: %w", p.Key, store.ErrKeyNotFound)
	}
	if value == nil {
		value = []byte{}
	}
	return value, nil
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
	runs, err := s.queryRuns(ctx, query, args...)
	if err != nil {
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
	where := []string{"namespace = ?"}
	args := []any{p.Namespace}
	add := func(cond string, a ...any) { where = append(where, cond); args = append(args, a...) }
	if len(p.Statuses) > 0 {
		marks := make([]string, len(p.Statuses))
		for i, st := range p.Statuses {
			if !st.Valid() {
				return "", nil, 0, fmt.Errorf("%w: Statuses: unknown status %q", store.ErrInvalidParams, st)
			}
			marks[i] = "?"
			args = append(args, string(st))
		}
		where = append(where, "status IN ("+strings.Join(marks, ", ")+")")
	}
	if p.Workflow != "" {
		add("workflow = ?", p.Workflow)
	}
	if p.WorkflowID != "" {
		add("workflow_id = ?", p.WorkflowID)
	}
	if !p.CreatedAfter.IsZero() {
		add("created_at >= ?", p.CreatedAfter.UnixNano())
	}
	if !p.CreatedBefore.IsZero() {
		add("created_at < ?", p.CreatedBefore.UnixNano())
	}
	after, err := store.ParseCursor(p.Cursor)
	if err != nil {
		return "", nil, 0, err
	}
	if after > 0 {
		add("sequence < ?", after)
	}
	query := `SELECT ` + runCols + ` FROM runs WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY sequence DESC LIMIT ?`
	return query, append(args, limit+1), limit, nil
}

func (s *Store) queryRuns(ctx context.Context, query string, args ...any) ([]*store.Run, error) {
	rows, err := s.reads.QueryContext(ctx, query, args...)
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
