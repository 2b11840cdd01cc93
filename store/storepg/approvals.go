package storepg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// Approvals are written once, in sqlstore; a checkpoint pipelines the statements
// that create and expire them (writeCheckpoint).

// ApprovalGet implements store.Store.
func (s *Store) ApprovalGet(ctx context.Context, p *store.ApprovalGetParams) (*store.Approval, error) {
	if s.closed() {
		return nil, fmt.Errorf("getting approval: %w", store.ErrClosed)
	}
	var a *store.Approval
	err := s.read(ctx, func() (err error) {
		a, err = shared.ApprovalGet(s.reads(ctx), p)
		return err
	})
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
	var res *store.ApprovalListResult
	err := s.read(ctx, func() (err error) {
		res, err = shared.ApprovalList(s.reads(ctx), p)
		return err
	})
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
	err := s.inTx(ctx, func(tx *wtx) (err error) {
		a, err = shared.ApprovalDecide(stx{tx}, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("deciding approval: %w", err)
	}
	return a, nil
}

// approvalCheck maps the unique violation of an approval's insert to
// sqlstore.ApprovalTaken.
func approvalCheck(id string) func(pgconn.CommandTag, error) error {
	return func(_ pgconn.CommandTag, err error) error {
		if isUniqueViolation(err) {
			return sqlstore.ApprovalTaken(id)
		}
		return err
	}
}
