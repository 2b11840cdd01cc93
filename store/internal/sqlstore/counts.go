package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// RunCounts implements store.RunCounter: one bounded count per status, each
// an index range scan of runs_status (namespace, status, sequence) that stops
// at the cap (with Dialect.RunningApart, running runs are counted through
// runs_running). The counts are not one snapshot: a run that changes status
// between two of them may be counted twice or not at all (the runs page
// refreshes).
func (r Reads) RunCounts(ctx context.Context, p *store.RunCountsParams) (*store.RunCountsResult, error) {
	limit := p.Cap
	if limit <= 0 {
		limit = store.DefaultCountCap
	}
	res := &store.RunCountsResult{Counts: map[store.Status]int64{}, Capped: map[store.Status]bool{}}
	err := r.read(ctx, "counting runs", func(q Querier) error {
		for _, st := range store.AllStatuses {
			query, args := r.sql.CountQuery(p, st, limit)
			var n int64
			if err := q.QueryRow(query, args...).Scan(&n); err != nil {
				return fmt.Errorf("status %s: %w", st, err)
			}
			res.Counts[st] = n
			res.Capped[st] = n > limit
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// CountQuery is the query of RunCounts for status st: the number of matching
// runs, up to limit+1, read as a list reads them (statusPart, runFilters).
func (s *SQL) CountQuery(p *store.RunCountsParams, st store.Status, limit int64) (string, []any) {
	l := &listQuery{s: s, a: &args{d: &s.d}}
	ns := l.arg(p.Namespace)
	l.cond("namespace = " + ns)
	part := s.statusPart(l, "1", ns, string(st))
	l.cond(part.cond)
	l.runFilters(p.Workflow, p.Queue, p.CreatedAfter, p.CreatedBefore)
	return `SELECT count(*) FROM (` + part.from + ` WHERE ` + strings.Join(l.where, " AND ") +
		` LIMIT ` + l.arg(limit+1) + `) AS c`, l.a.list
}
