package sqlstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Stmt is a statement with its arguments, for a driver to run or to pipeline.
type Stmt struct {
	SQL  string
	Args []any
}

// ApprovalInsert is the statement that creates the approval request a of run
// runSeq at now. A taken ID makes it fail with a unique violation, which
// ApprovalTaken reports.
func (s *SQL) ApprovalInsert(namespace string, runSeq int64, a *store.ApprovalRequest, now time.Time) (Stmt, error) {
	var approvers any
	if len(a.Approvers) > 0 {
		var err error
		if approvers, err = s.d.List(a.Approvers); err != nil {
			return Stmt{}, fmt.Errorf("encoding approvers: %w", err)
		}
	}
	return Stmt{SQL: s.q.approvalInsert, Args: []any{namespace, a.ID, runSeq, a.Position, a.Name, approvers,
		a.Subject, Blob(a.Details), s.d.Time(now), s.timePtr(a.ExpiresAt)}}, nil
}

// ApprovalTaken is the error of an approval request whose ID is taken.
func ApprovalTaken(id string) error {
	return fmt.Errorf("%w: Approvals: ID %q is taken", store.ErrInvalidParams, id)
}

// ApprovalsExpire is the statement that marks the pending approvals ids of run
// runSeq expired at now.
func (s *SQL) ApprovalsExpire(runSeq int64, ids []string, now time.Time) (Stmt, error) {
	list, err := s.d.List(ids)
	if err != nil {
		return Stmt{}, fmt.Errorf("encoding list: %w", err)
	}
	return Stmt{SQL: s.q.approvalsExpire, Args: []any{s.d.Time(now), runSeq, list}}, nil
}

// CreateApprovals inserts a checkpoint's approval requests one statement after the
// other (a driver that pipelines them runs the statements of ApprovalInsert).
func (s *SQL) CreateApprovals(tx Tx, namespace string, runSeq int64, reqs []*store.ApprovalRequest) error {
	for _, a := range reqs {
		st, err := s.ApprovalInsert(namespace, runSeq, a, tx.Now())
		if err != nil {
			return err
		}
		_, err = tx.Exec(st.SQL, st.Args...)
		if s.d.IsUniqueViolation(err) {
			return ApprovalTaken(a.ID)
		}
		if err != nil {
			return fmt.Errorf("creating approval %q: %w", a.ID, err)
		}
	}
	return nil
}

// ExpireApprovals marks the pending approvals ids of run runSeq expired.
func (s *SQL) ExpireApprovals(tx Tx, runSeq int64, ids []string) error {
	st, err := s.ApprovalsExpire(runSeq, ids, tx.Now())
	if err != nil {
		return err
	}
	if _, err := tx.Exec(st.SQL, st.Args...); err != nil {
		return fmt.Errorf("expiring approvals: %w", err)
	}
	return nil
}

// ValidateDecide checks the parameters of ApprovalDecide before any transaction.
func ValidateDecide(p *store.ApprovalDecideParams) error {
	if p.Principal == "" {
		return fmt.Errorf("%w: Principal is required", store.ErrInvalidParams)
	}
	return p.Idempotency.Validate()
}

// ApprovalDecide records the decision on a pending approval and delivers its
// event (store.ApprovalEvent) to the run, waking it if it waits for it. The
// approval and its run are locked first, after p's idempotency key is recorded.
func (s *SQL) ApprovalDecide(tx Tx, p *store.ApprovalDecideParams) (*store.Approval, error) {
	if err := s.IdempotencyBegin(tx, p.Namespace, p.Idempotency); err != nil {
		return nil, err
	}
	a, err := s.approvalDecide(tx, p)
	if err != nil {
		return nil, err
	}
	if err := s.IdempotencyFinish(tx, p.Namespace, p.Idempotency, a); err != nil {
		return nil, err
	}
	return a, nil
}

func (s *SQL) approvalDecide(tx Tx, p *store.ApprovalDecideParams) (*store.Approval, error) {
	r, err := s.LockApproval(tx, p.Namespace, p.ID)
	if err != nil {
		return nil, err
	}
	if err := decidable(r, p.ID, tx.Now()); err != nil {
		return nil, err
	}
	a := r.Approval
	a.Status, a.Principal, a.Comment = store.ApprovalRejected, p.Principal, p.Comment
	if p.Approve {
		a.Status = store.ApprovalApproved
	}
	decided := tx.Now().UTC()
	a.DecidedAt = &decided
	if _, err := tx.Exec(s.q.approvalSet, string(a.Status), a.Principal, a.Comment, s.d.Time(decided), r.Seq); err != nil {
		return nil, fmt.Errorf("saving decision: %w", err)
	}
	payload, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("encoding decision: %w", err)
	}
	if _, _, err := s.Deliver(tx, r.RunSeq, store.ApprovalEvent(a.ID), payload); err != nil {
		return nil, err
	}
	return a, nil
}

// decidable fails when the approval r can no longer be decided at now.
func decidable(r *ApprovalRow, id string, now time.Time) error {
	switch {
	case r.Status != store.ApprovalPending:
		return fmt.Errorf("%w: approval %q is %s", store.ErrApprovalDecided, id, r.Status)
	case r.ExpiresAt != nil && !now.Before(*r.ExpiresAt):
		return fmt.Errorf("%w: approval %q expired at %v", store.ErrApprovalDecided, id, *r.ExpiresAt)
	case r.RunStatus.Terminal():
		return fmt.Errorf("%w: run %q of approval %q is %s", store.ErrRunFinished, r.RunID, id, r.RunStatus)
	}
	return nil
}

// timePtr encodes an optional time argument; nil and the zero time are NULL.
func (s *SQL) timePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return s.d.Time(*t)
}
