package sqlstore

import (
	"fmt"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// listQuery builds the query of one page of a list, newest first: conditions joined
// by AND, a cursor (store.ParseCursor) on a sequence column, and limit+1 rows so
// that store.Page can tell whether more follow. Every list of the store (runs,
// approvals, and those to come) is built with it.
type listQuery struct {
	s     *SQL
	a     *args
	where []string
	limit int
}

// newList starts a list with the page size of limit (store.ListLimit).
func (s *SQL) newList(limit int) (*listQuery, error) {
	n, err := store.ListLimit(limit)
	if err != nil {
		return nil, err
	}
	return &listQuery{s: s, a: &args{d: &s.d}, limit: n}, nil
}

// arg adds a parameter and returns its marker.
func (l *listQuery) arg(v any) string { return l.a.add(v) }

// cond adds a condition, written with markers from arg.
func (l *listQuery) cond(c string) { l.where = append(l.where, c) }

// eq adds "expr = v".
func (l *listQuery) eq(expr string, v any) { l.cond(expr + " = " + l.arg(v)) }

// in adds "expr is one of list".
func (l *listQuery) in(expr string, list []string) error {
	v, err := l.s.d.List(list)
	if err != nil {
		return fmt.Errorf("encoding list: %w", err)
	}
	l.cond(l.s.d.InList(expr, l.arg(v)))
	return nil
}

// after adds the cursor's condition on the sequence column seq: the page starts
// below the last row of the previous one.
func (l *listQuery) after(seq, cursor string) error {
	after, err := store.ParseCursor(cursor)
	if err != nil {
		return err
	}
	if after > 0 {
		l.cond(seq + " < " + l.arg(after))
	}
	return nil
}

// build returns the query: selectFrom (a SELECT ... FROM ... without WHERE), the
// conditions, newest first by seq.
func (l *listQuery) build(selectFrom, seq string) (string, []any) {
	q := selectFrom
	if len(l.where) > 0 {
		q += ` WHERE ` + strings.Join(l.where, " AND ")
	}
	q += ` ORDER BY ` + seq + ` DESC LIMIT ` + l.arg(l.limit+1)
	return q, l.a.list
}
