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
