package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// RunCounts implements store.RunCounter: one bounded count per status, each
// an index range scan of runs_status (namespace, status, sequence) that stops
// at the cap. The counts are not one snapshot: a run that changes status between
// two of them may be counted twice or not at all (the runs page refreshes).
func (r Reads) RunCounts(ctx context.Context, p *store.RunCountsParams) (*store.RunCountsResult, error) {
	limit := p.Cap
	if limit <= 0 {
		limit = store.DefaultCountCap
	}
	res := &store.RunCountsResult{Counts: map[store.Status]int64{}, Capped: map[store.Status]bool{}}
	err := r.read(ctx, "counting runs", func(q Querier) error {
		for _, st := range store.AllStatuses {
			a := &args{d: &r.sql.d}
			where := []string{"namespace = " + a.add(p.Namespace), "status = " + a.add(string(st))}
			if p.Workflow != "" {
				where = append(where, "workflow = "+a.add(p.Workflow))
			}
			if p.Queue != "" {
				where = append(where, "queue = "+a.add(p.Queue))
			}
			if !p.CreatedAfter.IsZero() {
				where = append(where, "created_at >= "+a.add(r.sql.d.Time(p.CreatedAfter)))
			}
			if !p.CreatedBefore.IsZero() {
				where = append(where, "created_at < "+a.add(r.sql.d.Time(p.CreatedBefore)))
			}
			query := `SELECT count(*) FROM (SELECT 1 FROM runs WHERE ` + strings.Join(where, " AND ") +
				` LIMIT ` + a.add(limit+1) + `) AS c`
			var n int64
			if err := q.QueryRow(query, a.list...).Scan(&n); err != nil {
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
