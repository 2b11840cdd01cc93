package storepg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// RunCounts implements store.RunCounter.
func (s *Store) RunCounts(ctx context.Context) ([]store.RunCount, error) {
	if s.closed() {
		return nil, fmt.Errorf("counting runs: %w", store.ErrClosed)
	}
	var out []store.RunCount
	err := s.read(ctx, func() error {
		rows, err := s.pool.Query(ctx, sqlstore.RunCounts)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.RunCount, error) {
			var c store.RunCount
			err := row.Scan(&c.Namespace, &c.Queue, &c.Status, &c.Count)
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("counting runs: %w", s.readErr(err))
	}
	return out, nil
}
