package storepg

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// sqlRunsGet reads runs by ID; an empty $3 is any status.
//
// Each ID is looked up on its own, in a subquery that OFFSET 0 keeps the
// status filter out of, so that runs_namespace_id is the one index that fits.
// Written as one WHERE clause, the planner could read the runs of the wanted
// statuses through runs_status and filter them by ID: before the table has
// statistics (autovacuum off, or not yet run) it did, and so read every
// finished run of the namespace to find a few hundred.
const sqlRunsGet = `SELECT r.* FROM (SELECT DISTINCT unnest($2::text[])) AS x(id)
	CROSS JOIN LATERAL (SELECT ` + runCols + ` FROM runs WHERE namespace = $1 AND id = x.id OFFSET 0) AS r
	WHERE cardinality($3::text[]) = 0 OR r.status = ANY($3::text[])`

// runsGetRaw implements (under RunsGet, payloads.go) store.Store.
func (s *Store) runsGetRaw(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
	if s.closed() {
		return nil, fmt.Errorf("getting runs: %w", store.ErrClosed)
	}
	if err := store.ValidateRunsGet(p); err != nil {
		return nil, fmt.Errorf("getting runs: %w", err)
	}
	if len(p.IDs) == 0 {
		return []*store.Run{}, nil
	}
	sts := make([]string, len(p.Statuses))
	for i, st := range p.Statuses {
		sts[i] = string(st)
	}
	var runs []*store.Run
	if err := (seam{s}).Read(ctx, func(q sqlstore.Querier) (err error) {
		runs, err = sqlstore.Runs(q, sqlRunsGet, p.Namespace, p.IDs, sts)
		return err
	}); err != nil {
		return nil, fmt.Errorf("getting runs: %w", err)
	}
	return runs, nil
}
