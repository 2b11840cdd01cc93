package sqlstore

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// ApprovalRow is an approval with the keys of its row and its run's status.
type ApprovalRow struct {
	*store.Approval
	Seq, RunSeq int64
	RunStatus   store.Status
}

// approvalSelect selects the columns ScanApproval reads.
func (s *SQL) approvalSelect() string {
	return `SELECT a.namespace, a.id, r.id, r.workflow, a.position, a.name, ` +
		s.d.TextList("a.approvers") + `, a.subject, a.details, a.status, a.principal, a.comment,
	a.created_at, a.expires_at, a.decided_at, a.seq, a.run_seq, r.status
	FROM approvals a JOIN runs r ON r.sequence = a.run_seq`
}

// ScanApproval reads a row of approvalSelect.
func ScanApproval(sc Scanner) (*ApprovalRow, error) {
	var (
		a                         store.Approval
		r                         ApprovalRow
		approvers                 sql.NullString
		status, runStatus         string
		created, expires, decided Time
	)
	err := sc.Scan(&a.Namespace, &a.ID, &a.RunID, &a.Workflow, &a.Position, &a.Name, &approvers,
		&a.Subject, &a.Details, &status, &a.Principal, &a.Comment, &created, &expires, &decided,
		&r.Seq, &r.RunSeq, &runStatus)
	if err != nil {
		return nil, err
	}
	if approvers.Valid {
		if err := json.Unmarshal([]byte(approvers.String), &a.Approvers); err != nil {
			return nil, fmt.Errorf("decoding approvers: %w", err)
		}
	}
	a.Status, a.CreatedAt = store.ApprovalStatus(status), created.T
	a.ExpiresAt, a.DecidedAt = expires.Ptr(), decided.Ptr()
	r.Approval, r.RunStatus = &a, store.Status(runStatus)
	return &r, nil
}

// ApprovalGet reads an approval.
func (s *SQL) ApprovalGet(q Querier, p *store.ApprovalGetParams) (*store.Approval, error) {
	r, err := s.approvalByID(q, s.q.approvalGet, p.Namespace, p.ID)
	if err != nil {
		return nil, err
	}
	return r.Approval, nil
}

func (s *SQL) approvalByID(q Querier, query, namespace, id string) (*ApprovalRow, error) {
	r, err := ScanApproval(q.QueryRow(query, namespace, id))
	if errors.Is(err, ErrNoRows) {
		return nil, store.ApprovalNotFound(namespace, id)
	}
	return r, err
}

// ApprovalList reads one page of approvals.
func (s *SQL) ApprovalList(q Querier, p *store.ApprovalListParams) (*store.ApprovalListResult, error) {
	query, args, limit, err := s.approvalListQuery(p)
	if err != nil {
		return nil, err
	}
	var page []*ApprovalRow
	err = q.Query(query, args, func(row Scanner) error {
		r, err := ScanApproval(row)
		if err == nil {
			page = append(page, r)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	res := &store.ApprovalListResult{Approvals: []*store.Approval{}}
	page, res.NextCursor = store.Page(page, limit, func(r *ApprovalRow) int64 { return r.Seq })
	for _, r := range page {
		res.Approvals = append(res.Approvals, r.Approval)
	}
	return res, nil
}

// approvalListQuery builds the query of one page.
func (s *SQL) approvalListQuery(p *store.ApprovalListParams) (string, []any, int, error) {
	l, err := s.newList(p.Limit)
	if err != nil {
		return "", nil, 0, err
	}
	l.eq("a.namespace", p.Namespace)
	if len(p.Statuses) > 0 {
		sts := make([]string, len(p.Statuses))
		for i, st := range p.Statuses {
			switch st {
			case store.ApprovalPending, store.ApprovalApproved, store.ApprovalRejected, store.ApprovalExpired:
			default:
				return "", nil, 0, fmt.Errorf("%w: Statuses: unknown status %q", store.ErrInvalidParams, st)
			}
			sts[i] = string(st)
		}
		if err := l.in("a.status", sts); err != nil {
			return "", nil, 0, err
		}
	}
	if p.Run != "" {
		l.cond("a.run_seq = (SELECT sequence FROM runs WHERE namespace = a.namespace AND id = " + l.arg(p.Run) + ")")
	}
	if err := l.after("a.seq", p.Cursor); err != nil {
		return "", nil, 0, err
	}
	query, args := l.build(s.approvalSelect(), "a.seq")
	return query, args, l.limit, nil
}

// LockApproval reads an approval and locks it and its run until the transaction
// ends.
func (s *SQL) LockApproval(q Querier, namespace, id string) (*ApprovalRow, error) {
	return s.approvalByID(q, s.q.approvalLock, namespace, id)
}
