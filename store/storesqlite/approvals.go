package storesqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

const (
	sqlApprovalInsert = `INSERT INTO approvals (namespace, id, run_seq, position, name, approvers,
	subject, details, status, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)`
	sqlApprovalsExpire = `UPDATE approvals SET status = 'expired', decided_at = ?1
	WHERE run_seq = ?2 AND status = 'pending' AND id IN (SELECT value FROM json_each(?3))`
	sqlApprovalSet = `UPDATE approvals SET status = ?, principal = ?, comment = ?, decided_at = ?
	WHERE seq = ?`
)

// createApprovals inserts a checkpoint's approval requests. A taken ID fails with
// store.ErrInvalidParams after writing: the request is dirty, so the batch is
// replayed with savepoints and nothing of the checkpoint remains.
func createApprovals(tx *wtx, namespace string, runSeq int64, reqs []*store.ApprovalRequest) error {
	for _, a := range reqs {
		approvers, err := approversJSON(a.Approvers)
		if err != nil {
			return err
		}
		_, err = tx.exec(sqlApprovalInsert, namespace, a.ID, runSeq, a.Position, a.Name, approvers,
			a.Subject, blob(a.Details), tx.now.UnixNano(), nsPtr(a.ExpiresAt))
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: Approvals: ID %q is taken", store.ErrInvalidParams, a.ID)
		}
		if err != nil {
			return fmt.Errorf("creating approval %q: %w", a.ID, err)
		}
	}
	return nil
}

func approversJSON(list []string) (any, error) {
	if len(list) == 0 {
		return nil, nil
	}
	return jsonList(list)
}

// expireApprovals marks the run's pending approvals of ids expired.
func expireApprovals(tx *wtx, runSeq int64, ids []string) error {
	list, err := jsonList(ids)
	if err != nil {
		return err
	}
	if _, err := tx.exec(sqlApprovalsExpire, tx.now.UnixNano(), runSeq, list); err != nil {
		return fmt.Errorf("expiring approvals: %w", err)
	}
	return nil
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
	if p.Principal == "" {
		return nil, fmt.Errorf("deciding approval: %w: Principal is required", store.ErrInvalidParams)
	}
	var a *store.Approval
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		a, err = approvalDecide(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("deciding approval: %w", err)
	}
	return a, nil
}

func approvalDecide(tx *wtx, p *store.ApprovalDecideParams) (*store.Approval, error) {
	r, err := shared.LockApproval(tx, p.Namespace, p.ID)
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
	decided := fromNS(sql.NullInt64{Int64: tx.now.UnixNano(), Valid: true})
	a.DecidedAt = &decided
	if _, err := tx.exec(sqlApprovalSet, string(a.Status), a.Principal, a.Comment, decided.UnixNano(), r.Seq); err != nil {
		return nil, fmt.Errorf("saving decision: %w", err)
	}
	payload, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	if _, _, err := shared.Deliver(tx, r.RunSeq, store.ApprovalEvent(a.ID), payload); err != nil {
		return nil, err
	}
	return a, nil
}
