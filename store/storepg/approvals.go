package storepg

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

const (
	sqlApprovalInsert = `INSERT INTO approvals (namespace, id, run_seq, position, name, approvers,
	subject, details, status, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9, $10)`
	sqlApprovalsExpire = `UPDATE approvals SET status = 'expired', decided_at = $1
	WHERE run_seq = $2 AND status = 'pending' AND id = ANY($3::text[])`
	sqlApprovalSet = `UPDATE approvals SET status = $1, principal = $2, comment = $3, decided_at = $4
	WHERE seq = $5`
)

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
	if p.Principal == "" {
		return nil, fmt.Errorf("deciding approval: %w: Principal is required", store.ErrInvalidParams)
	}
	var a *store.Approval
	err := s.inTx(ctx, func(tx *wtx) (err error) {
		a, err = approvalDecide(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("deciding approval: %w", err)
	}
	return a, nil
}

func approvalDecide(tx *wtx, p *store.ApprovalDecideParams) (*store.Approval, error) {
	r, err := shared.LockApproval(stx{tx}, p.Namespace, p.ID)
	switch {
	case err != nil:
		return nil, err
	case r.Status != store.ApprovalPending:
		return nil, fmt.Errorf("%w: approval %q is %s", store.ErrApprovalDecided, p.ID, r.Status)
	case r.ExpiresAt != nil && !tx.now.Before(*r.ExpiresAt):
		return nil, fmt.Errorf("%w: approval %q expired at %v", store.ErrApprovalDecided, p.ID, *r.ExpiresAt)
	case r.RunStatus.Terminal():
		return nil, fmt.Errorf("%w: run %q of approval %q is %s", store.ErrRunFinished, r.RunID, p.ID, r.RunStatus)
	}
	a := r.Approval
	a.Status, a.Principal, a.Comment = store.ApprovalRejected, p.Principal, p.Comment
	if p.Approve {
		a.Status = store.ApprovalApproved
	}
	decided := tx.now.UTC()
	a.DecidedAt = &decided
	if _, err := tx.exec(sqlApprovalSet, string(a.Status), a.Principal, a.Comment, decided, r.Seq); err != nil {
		return nil, fmt.Errorf("saving decision: %w", err)
	}
	payload, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	if _, _, err := shared.Deliver(stx{tx}, r.RunSeq, store.ApprovalEvent(a.ID), payload); err != nil {
		return nil, err
	}
	return a, nil
}
