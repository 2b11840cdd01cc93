package storesqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// sqlRunsGet reads runs by ID through runs_namespace_id; ?3 is a JSON array of
// statuses, '[]' for any.
const sqlRunsGet = `SELECT ` + runCols + ` FROM runs
	WHERE namespace = ?1 AND id IN (SELECT value FROM json_each(?2))
	AND (?3 = '[]' OR status IN (SELECT value FROM json_each(?3)))`

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
	ids, err := json.Marshal(p.IDs)
	if err != nil {
		return nil, fmt.Errorf("getting runs: %w", err)
	}
	sts := []byte("[]")
	if len(p.Statuses) > 0 {
		if sts, err = json.Marshal(p.Statuses); err != nil {
			return nil, fmt.Errorf("getting runs: %w", err)
		}
	}
	var runs []*store.Run
	if err := (seam{s}).Read(ctx, func(q sqlstore.Querier) (err error) {
		runs, err = sqlstore.Runs(q, sqlRunsGet, p.Namespace, string(ids), string(sts))
		return err
	}); err != nil {
		return nil, fmt.Errorf("getting runs: %w", err)
	}
	return runs, nil
}
