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
// runs, up to limit+1. With Dialect.RunningApart it names the condition of the
// partial index it is meant to read: status = 'running' (runs_running), or
// status <> 'running' (runs_status); SQLite reads a partial index only for a
// query whose WHERE clause has its condition's terms as they are written.
func (s *SQL) CountQuery(p *store.RunCountsParams, st store.Status, limit int64) (string, []any) {
	a := &args{d: &s.d}
	where := []string{"namespace = " + a.add(p.Namespace)}
	switch {
	case !s.d.RunningApart:
		where = append(where, "status = "+a.add(string(st)))
	case st == store.StatusRunning:
		where = append(where, "status = 'running'")
	default:
		where = append(where, "status = "+a.add(string(st)), "status <> 'running'")
	}
	if p.Workflow != "" {
		where = append(where, "workflow = "+a.add(p.Workflow))
	}
	if p.Queue != "" {
		where = append(where, "queue = "+a.add(p.Queue))
	}
	if !p.CreatedAfter.IsZero() {
		where = append(where, "created_at >= "+a.add(s.d.Time(p.CreatedAfter)))
	}
	if !p.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+a.add(s.d.Time(p.CreatedBefore)))
	}
	query := `SELECT count(*) FROM (SELECT 1 FROM runs WHERE ` + strings.Join(where, " AND ") +
		` LIMIT ` + a.add(limit+1) + `) AS c`
	return query, a.list
}
