package storepg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// QueueCounts implements store.QueueCounter.
func (s *Store) QueueCounts(ctx context.Context) ([]store.QueueCount, error) {
	if s.closed() {
		return nil, fmt.Errorf("counting runs by queue: %w", store.ErrClosed)
	}
	var out []store.QueueCount
	err := s.read(ctx, func() error {
		rows, err := s.pool.Query(ctx, sqlstore.QueueCounts)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.QueueCount, error) {
			var c store.QueueCount
			err := row.Scan(&c.Namespace, &c.Queue, &c.Status, &c.Count)
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("counting runs by queue: %w", s.readErr(err))
	}
	return out, nil
}
