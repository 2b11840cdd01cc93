package storesqlite

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// QueueCounts implements store.QueueCounter.
func (s *Store) QueueCounts(ctx context.Context) ([]store.QueueCount, error) {
	if s.closed() {
		return nil, fmt.Errorf("counting runs by queue: %w", store.ErrClosed)
	}
	rows, err := s.reads.QueryContext(ctx, sqlstore.QueueCounts)
	if err != nil {
		return nil, fmt.Errorf("counting runs by queue: %w", s.readErr(err))
	}
	defer rows.Close()
	out := []store.QueueCount{}
	for rows.Next() {
		var c store.QueueCount
		if err := rows.Scan(&c.Namespace, &c.Queue, &c.Status, &c.Count); err != nil {
			return nil, fmt.Errorf("counting runs by queue: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting runs by queue: %w", s.readErr(err))
	}
	return out, nil
}
