package storesqlite

import (
	"context"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// Payloads stored apart (package store/blobs, docs/payloads.md) are moved
// apart and read back by the shared methods (sqlstore.Methods, apart.go); the
// hot path's methods, here, call the writer directly.

// Checkpoint implements store.Store.
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	q, err := sqlstore.CheckpointPayloads(&s.methods, ctx, p)
	if err != nil {
		return nil, err
	}
	return s.checkpointRaw(ctx, q)
}

// CheckpointTx implements store.TxCheckpointer.
func (s *Store) CheckpointTx(ctx context.Context, p *store.CheckpointParams, fn func(ctx context.Context, tx any) error) (*store.CheckpointResult, error) {
	q, err := sqlstore.CheckpointPayloads(&s.methods, ctx, p)
	if err != nil {
		return nil, err
	}
	return s.checkpointTxRaw(ctx, q, fn)
}

// RunsClaim implements store.Store: each claimed run comes with its input,
// history and inbox whole.
func (s *Store) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	res, err := s.runsClaimRaw(ctx, p)
	return sqlstore.ClaimedPayloads(&s.methods, ctx, res, err)
}
