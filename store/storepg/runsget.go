package storepg

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// sqlRunsGet reads runs by ID through runs_namespace_id; an empty $3 is any status.
const sqlRunsGet = `SELECT ` + runCols + ` FROM runs
	WHERE namespace = $1 AND id = ANY($2::text[])
	AND (cardinality($3::text[]) = 0 OR status = ANY($3::text[]))`

// RunsGet implements store.Store.
func (s *Store) RunsGet(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
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
	if err := (readSource{s}).Read(ctx, func(q sqlstore.Querier) (err error) {
		runs, err = sqlstore.Runs(q, sqlRunsGet, p.Namespace, p.IDs, sts)
		return err
	}); err != nil {
		return nil, fmt.Errorf("getting runs: %w", err)
	}
	return runs, nil
}
