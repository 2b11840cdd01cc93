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
	if s.closed() {
		return nil, fmt.Errorf("getting approval: %w", store.ErrClosed)
	}
	a, err := shared.ApprovalGet(s.readQ(ctx), p)
	if err != nil {
		return nil, fmt.Errorf("getting approval: %w", s.readErr(err))
	}
	return a, nil
}

// ApprovalList implements store.Store.
func (s *Store) ApprovalList(ctx context.Context, p *store.ApprovalListParams) (*store.ApprovalListResult, error) {
	if s.closed() {
		return nil, fmt.Errorf("listing approvals: %w", store.ErrClosed)
	}
	res, err := shared.ApprovalList(s.readQ(ctx), p)
	if err != nil {
		return nil, fmt.Errorf("listing approvals: %w", s.readErr(err))
	}
	return res, nil
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
