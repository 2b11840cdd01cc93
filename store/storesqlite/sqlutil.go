package storesqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// querier is what the shared read helpers need: the read pool (*sql.DB) or the
// write transaction (*wtx).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (rowsIter, error)
	QueryRowContext(ctx context.Context, query string, args ...any) scanner
}

// rowsIter is *sql.Rows or the writer's rawRows.
type rowsIter interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// ns encodes a time as unix nanoseconds; the zero time is NULL.
func ns(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// nsPtr encodes an optional time; nil and the zero time are NULL.
func nsPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return ns(*t)
}

// fromNS decodes a time column; NULL is the zero time.
func fromNS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.Unix(0, v.Int64).UTC()
}

// fromNSPtr decodes an optional time column.
func fromNSPtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.Unix(0, v.Int64).UTC()
	return &t
}

// errJSON encodes an optional ErrorInfo as JSON text (NULL when nil).
func errJSON(e *store.ErrorInfo) (any, error) { return sqlstore.ErrJSON(e) }

// isUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY constraint
// failure.
func isUniqueViolation(err error) bool { return sqlitedrv.IsUniqueViolation(err) }

// blob returns b as a BLOB argument, keeping nil as NULL.
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// boolInt encodes a bool as 0 or 1.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// jsonList encodes a list for "IN (SELECT value FROM json_each(?))", which keeps
// one prepared statement for any list length.
func jsonList(list []string) (string, error) {
	b, err := json.Marshal(list)
	if err != nil {
		return "", fmt.Errorf("encoding list: %w", err)
	}
	return string(b), nil
}

// nonNilBlob returns b as a BLOB argument, with nil stored as an empty BLOB (a
// key set to nothing still exists).
func nonNilBlob(b []byte) any {
	if b == nil {
		return []byte{}
	}
	return b
}

// diskError reports whether err is SQLite's "database or disk is full" or an I/O
// error: the WAL is then truncated to give the space back (see walCheckpointer).
func diskError(err error) bool { return sqlitedrv.IsDiskError(err) }
