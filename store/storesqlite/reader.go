package storesqlite

import (
	"context"
	"database/sql"
	"sync"
)

// reader runs read queries on the read pool through statements prepared once per
// query (database/sql prepares each on a connection the first time it uses it).
// Preparing SQLite statements anew on every call cost more than running them.
type reader struct {
	db    *sql.DB
	mu    sync.RWMutex
	stmts map[string]*sql.Stmt
}

func newReader(db *sql.DB) *reader {
	return &reader{db: db, stmts: make(map[string]*sql.Stmt)}
}

func (r *reader) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	r.mu.RLock()
	st := r.stmts[query]
	r.mu.RUnlock()
	if st != nil {
		return st, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.stmts[query]; st != nil {
		return st, nil
	}
	if r.stmts == nil {
		return nil, sql.ErrConnDone // closed
	}
	st, err := r.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	r.stmts[query] = st
	return st, nil
}

// QueryContext implements querier.
func (r *reader) QueryContext(ctx context.Context, query string, args ...any) (rowsIter, error) {
	st, err := r.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext implements querier.
func (r *reader) QueryRowContext(ctx context.Context, query string, args ...any) scanner {
	st, err := r.stmt(ctx, query)
	if err != nil {
		return r.db.QueryRowContext(ctx, query, args...) // the Row carries the error
	}
	return st.QueryRowContext(ctx, args...)
}

// close closes the prepared statements (not the pool).
func (r *reader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range r.stmts {
		_ = st.Close()
	}
	r.stmts = nil
}
