package storesqlite

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// createApprovals inserts a checkpoint's approval requests. A taken ID fails with
// store.ErrInvalidParams after writing: the request is dirty, so the batch is
// replayed with savepoints and nothing of the checkpoint remains.
func createApprovals(tx *wtx, namespace string, runSeq int64, reqs []*store.ApprovalRequest) error {
	return shared.CreateApprovals(tx, namespace, runSeq, reqs)
}

// expireApprovals marks the run's pending approvals of ids expired.
func expireApprovals(tx *wtx, runSeq int64, ids []string) error {
	return shared.ExpireApprovals(tx, runSeq, ids)
}

// ApprovalGet implements store.Store.
func (s *Store) ApprovalGet(ctx context.Context, p *store.ApprovalGetParams) (*store.Approval, error) {
	return shared.Reads(readSource{s}).ApprovalGet(ctx, p)
}

// ApprovalList implements store.Store.
func (s *Store) ApprovalList(ctx context.Context, p *store.ApprovalListParams) (*store.ApprovalListResult, error) {
	return shared.Reads(readSource{s}).ApprovalList(ctx, p)
}

// ApprovalDecide implements store.Store.
func (s *Store) ApprovalDecide(ctx context.Context, p *store.ApprovalDecideParams) (*store.Approval, error) {
	if err := sqlstore.ValidateDecide(p); err != nil {
		return nil, fmt.Errorf("deciding approval: %w", err)
	}
	var a *store.Approval
	err := s.write(ctx, func(tx *wtx) (err error) {
		a, err = shared.ApprovalDecide(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("deciding approval: %w", err)
	}
	return a, nil
}
