package storepg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-dev/trellis/store"
)

// Checkpoint implements store.Store. The writer merges the checkpoints of a batch
// into one statement (see sqlCheckpoints).
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	ck, err := newCkReq(s.now(), p)
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	l := p.Lease
	var topics []string
	if p.Status != store.StatusRunning {
		topics = append(topics, store.RunTopic(l.Namespace, l.RunID))
	}
	if p.Status == store.StatusPending || p.Status == store.StatusWaiting {
		topics = append(topics, store.TopicReady)
	}
	r := &request{ctx: ctx, ck: ck, topics: topics, done: make(chan error, 1)}
	if _, err := s.submit(ctx, r); err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	if ck.res == nil {
		return nil, fmt.Errorf("checkpointing: %w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
	}
	return ck.res, nil
}

func textArg(s *string) pgtype.Text {
	if s == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: *s, Valid: true}
}

func tsArg(t *time.Time) pgtype.Timestamptz {
	if t == nil {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: *t, Valid: true}
}
