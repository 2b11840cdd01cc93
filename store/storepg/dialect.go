package storepg

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// shared is the logic both SQL drivers share (store/internal/sqlstore), in
// Postgres' dialect.
var shared = sqlstore.New(sqlstore.Dialect{
	Name:  "postgres",
	Param: func(n int) string { return "$" + strconv.Itoa(n) },
	Time: func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t
	},
	InList: func(expr, param string) string { return expr + " = ANY(" + param + "::text[])" },
	List:   func(list []string) (any, error) { return orEmpty(list), nil },
	TextList: func(col string) string {
		return "array_to_json(" + col + ")::text"
	},
	IsUniqueViolation: isUniqueViolation,
	// WakeOnEvent also forgets the names the run waited for (see 0002_waiting.sql).
	WakeOnEvent: `UPDATE runs SET status = 'pending', available_at = $1, wait_reason = '',
	wait_events = NULL, updated_at = $1 WHERE sequence = $2 AND status = 'waiting' AND $3 = ANY(wait_events)
	RETURNING namespace, id`,
	Lock: func(of ...string) string {
		if len(of) == 0 {
			return " FOR NO KEY UPDATE"
		}
		return " FOR NO KEY UPDATE OF " + strings.Join(of, ", ")
	},
})

// pgQuerier is what a pool, a connection and a transaction share.
type pgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// querier adapts a pool or a transaction to sqlstore.Querier.
type querier struct {
	ctx context.Context
	c   pgQuerier
}

// QueryRow implements sqlstore.Querier.
func (q querier) QueryRow(query string, args ...any) sqlstore.Scanner {
	return noRows{q.c.QueryRow(q.ctx, query, args...)}
}

// Query implements sqlstore.Querier.
func (q querier) Query(query string, args []any, each func(row sqlstore.Scanner) error) error {
	rows, err := q.c.Query(q.ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Exec implements sqlstore.Querier.
func (q querier) Exec(query string, args ...any) (int64, error) {
	tag, err := q.c.Exec(q.ctx, query, args...)
	return tag.RowsAffected(), err
}

// noRows reports pgx.ErrNoRows as sqlstore.ErrNoRows.
type noRows struct{ row pgx.Row }

func (r noRows) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sqlstore.ErrNoRows
	}
	return err
}

// stx adapts a transaction of the waiting path (txn.go) to sqlstore.Tx.
type stx struct{ tx *wtx }

// QueryRow implements sqlstore.Querier.
func (s stx) QueryRow(query string, args ...any) sqlstore.Scanner {
	return noRows{s.tx.queryRow(query, args...)}
}

// Query implements sqlstore.Querier.
func (s stx) Query(query string, args []any, each func(row sqlstore.Scanner) error) error {
	return querier{ctx: s.tx.ctx, c: s.tx.Tx}.Query(query, args, each)
}

// Exec implements sqlstore.Querier.
func (s stx) Exec(query string, args ...any) (int64, error) {
	return querier{ctx: s.tx.ctx, c: s.tx.Tx}.Exec(query, args...)
}

// Now implements sqlstore.Tx.
func (s stx) Now() time.Time { return s.tx.now }

// Publish implements sqlstore.Tx.
func (s stx) Publish(topics ...string) { s.tx.publish(topics...) }
