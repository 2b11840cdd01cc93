package storesqlite

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// RunCounts implements store.RunCounter.
func (s *Store) RunCounts(ctx context.Context) ([]store.RunCount, error) {
	if s.closed() {
		return nil, fmt.Errorf("counting runs: %w", store.ErrClosed)
	}
	rows, err := s.reads.QueryContext(ctx, sqlstore.RunCounts)
	if err != nil {
		return nil, fmt.Errorf("counting runs: %w", s.readErr(err))
	}
	defer rows.Close()
	out := []store.RunCount{}
	for rows.Next() {
		var c store.RunCount
		if err := rows.Scan(&c.Namespace, &c.Queue, &c.Status, &c.Count); err != nil {
			return nil, fmt.Errorf("counting runs: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting runs: %w", s.readErr(err))
	}
	return out, nil
}
