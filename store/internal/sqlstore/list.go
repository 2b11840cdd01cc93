package sqlstore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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
	// alts, when set, split the list in parts, each read apart (newest first,
	// a page at most) and merged: a part's SELECT ... FROM and its own
	// condition, joined to the list's.
	alts []listAlt
}

// listAlt is one part of a list read in parts (listQuery.alts).
type listAlt struct {
	from, cond string
	// late: the part is read after the others, and only above the lowest
	// sequence of the page they fill on their own (see build). For a part
	// whose index holds many dead entries (the active statuses' on Postgres,
	// which runs leave behind as they move on until a vacuum), that reads
	// the newest entries only instead of walking every dead one.
	late bool
	// boundedFrom, when set, replaces from when the part is read late above
	// such a bound: the bound limits whatever walk the planner chooses, where
	// from may have had to keep it from choosing one (Dialect.RunningRuns).
	boundedFrom string
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

// runFilters adds the filters a list of runs and a count of them share: a
// workflow, a queue, and a creation time from after (inclusive) to before
// (exclusive); empty ones are left out.
func (l *listQuery) runFilters(workflow, queue string, after, before time.Time) {
	if workflow != "" {
		l.eq("workflow", workflow)
	}
	if queue != "" {
		l.eq("queue", queue)
	}
	if !after.IsZero() {
		l.cond("created_at >= " + l.arg(l.s.d.Time(after)))
	}
	if !before.IsZero() {
		l.cond("created_at < " + l.arg(l.s.d.Time(before)))
	}
}

// build returns the query: selectFrom (a SELECT ... FROM ... without WHERE), the
// conditions, newest first by seq. A list in parts (alts) is the UNION ALL of
// each part's first page, newest first; a list of one part is that part.
func (l *listQuery) build(selectFrom, seq string) (string, []any) {
	if len(l.alts) == 1 {
		selectFrom = l.alts[0].from
		l.cond(l.alts[0].cond)
		l.alts = nil
	}
	where := strings.Join(l.where, " AND ")
	limit := l.arg(l.limit + 1)
	if len(l.alts) == 0 {
		q := selectFrom
		if where != "" {
			q += ` WHERE ` + where
		}
		return q + ` ORDER BY ` + seq + ` DESC LIMIT ` + limit, l.a.list
	}
	// Parts are read late only when some are not.
	bounded := slices.ContainsFunc(l.alts, func(a listAlt) bool { return a.late }) &&
		slices.ContainsFunc(l.alts, func(a listAlt) bool { return !a.late })
	var early, late []string
	for i, alt := range l.alts {
		cond := alt.cond
		if where != "" {
			cond = where + ` AND ` + cond
		}
		from := alt.from
		if bounded && alt.late {
			// The page's rows from this part are above the lowest of the
			// page the early parts fill (sequences are unique): b.s, or 0
			// when they fill less than a page.
			cond += ` AND ` + seq + ` > (SELECT s FROM b)`
			if alt.boundedFrom != "" {
				from = alt.boundedFrom
			}
		}
		part := `SELECT * FROM (` + from + ` WHERE ` + cond + ` ORDER BY ` + seq + ` DESC LIMIT ` + limit + `) AS p` + strconv.Itoa(i)
		if bounded && alt.late {
			late = append(late, part)
		} else {
			early = append(early, part)
		}
	}
	page := ` ORDER BY ` + seq + ` DESC LIMIT ` + limit
	if !bounded {
		return strings.Join(early, ` UNION ALL `) + page, l.a.list
	}
	return `WITH f AS (` + strings.Join(early, ` UNION ALL `) + page + `), ` +
		`b AS (SELECT CASE WHEN count(*) < ` + limit + ` THEN 0 ELSE min(` + seq + `) END AS s FROM f) ` +
		`SELECT * FROM (SELECT * FROM f UNION ALL ` + strings.Join(late, ` UNION ALL `) + `) AS m` + page, l.a.list
}
