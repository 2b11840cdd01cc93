package storesqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

const (
	sqlApprovalInsert = `INSERT INTO approvals (namespace, id, run_seq, position, name, approvers,
	subject, details, status, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)`
	sqlApprovalsExpire = `UPDATE approvals SET status = 'expired', decided_at = ?1
	WHERE run_seq = ?2 AND status = 'pending' AND id IN (SELECT value FROM json_each(?3))`
	// approvalCols are the columns scanApproval reads, then the approval's seq, its
	// run's sequence and status.
	approvalCols = `a.namespace, a.id, r.id, r.workflow, a.position, a.name, a.approvers,
	a.subject, a.details, a.status, a.principal, a.comment, a.created_at, a.expires_at,
	a.decided_at, a.seq, a.run_seq, r.status`
	approvalFrom   = ` FROM approvals a JOIN runs r ON r.sequence = a.run_seq`
	sqlApprovalGet = `SELECT ` + approvalCols + approvalFrom + ` WHERE a.namespace = ? AND a.id = ?`
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

// approvalRow is an approval with the keys of its row and its run's status.
type approvalRow struct {
	*store.Approval
	seq, runSeq int64
	runStatus   store.Status
}

func scanApproval(sc scanner) (*approvalRow, error) {
	var (
		a                           store.Approval
		r                           approvalRow
		approvers                   sql.NullString
		created                     int64
		expires, decided            sql.NullInt64
		status, runStatus           string
		principal, comment, subject string
	)
	err := sc.Scan(&a.Namespace, &a.ID, &a.RunID, &a.Workflow, &a.Position, &a.Name, &approvers,
		&subject, &a.Details, &status, &principal, &comment, &created, &expires, &decided,
		&r.seq, &r.runSeq, &runStatus)
	if err != nil {
		return nil, err
	}
	if approvers.Valid {
		if err := json.Unmarshal([]byte(approvers.String), &a.Approvers); err != nil {
			return nil, fmt.Errorf("decoding approvers: %w", err)
		}
	}
	a.Subject, a.Status, a.Principal, a.Comment = subject, store.ApprovalStatus(status), principal, comment
	a.CreatedAt = fromNS(sql.NullInt64{Int64: created, Valid: true})
	a.ExpiresAt, a.DecidedAt = fromNSPtr(expires), fromNSPtr(decided)
	r.Approval, r.runStatus = &a, store.Status(runStatus)
	return &r, nil
}

// ApprovalGet implements store.Store.
func (s *Store) ApprovalGet(ctx context.Context, p *store.ApprovalGetParams) (*store.Approval, error) {
	if s.closed() {
		return nil, fmt.Errorf("getting approval: %w", store.ErrClosed)
	}
	r, err := approvalByID(ctx, s.reads, p.Namespace, p.ID)
	if err != nil {
		return nil, fmt.Errorf("getting approval: %w", s.readErr(err))
	}
	return r.Approval, nil
}

func approvalByID(ctx context.Context, q querier, namespace, id string) (*approvalRow, error) {
	r, err := scanApproval(q.QueryRowContext(ctx, sqlApprovalGet, namespace, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q in namespace %q", store.ErrApprovalNotFound, id, namespace)
	}
	return r, err
}

// ApprovalList implements store.Store.
func (s *Store) ApprovalList(ctx context.Context, p *store.ApprovalListParams) (*store.ApprovalListResult, error) {
	if s.closed() {
		return nil, fmt.Errorf("listing approvals: %w", store.ErrClosed)
	}
	query, args, limit, err := approvalListQuery(p)
	if err != nil {
		return nil, fmt.Errorf("listing approvals: %w", err)
	}
	rows, err := s.reads.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing approvals: %w", s.readErr(err))
	}
	defer rows.Close()
	var page []*approvalRow
	for rows.Next() {
		r, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("listing approvals: %w", err)
		}
		page = append(page, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing approvals: %w", s.readErr(err))
	}
	res := &store.ApprovalListResult{Approvals: []*store.Approval{}}
	page, res.NextCursor = store.Page(page, limit, func(r *approvalRow) int64 { return r.seq })
	for _, r := range page {
		res.Approvals = append(res.Approvals, r.Approval)
	}
	return res, nil
}

// approvalListQuery builds the query of one page (limit+1 rows, to see if more
// follow).
func approvalListQuery(p *store.ApprovalListParams) (string, []any, int, error) {
	limit, err := store.ListLimit(p.Limit)
	if err != nil {
		return "", nil, 0, err
	}
	where := []string{"a.namespace = ?"}
	args := []any{p.Namespace}
	if len(p.Statuses) > 0 {
		marks := make([]string, len(p.Statuses))
		for i, st := range p.Statuses {
			switch st {
			case store.ApprovalPending, store.ApprovalApproved, store.ApprovalRejected, store.ApprovalExpired:
			default:
				return "", nil, 0, fmt.Errorf("%w: Statuses: unknown status %q", store.ErrInvalidParams, st)
			}
			marks[i] = "?"
			args = append(args, string(st))
		}
		where = append(where, "a.status IN ("+strings.Join(marks, ", ")+")")
	}
	if p.Run != "" {
		where = append(where, "a.run_seq = (SELECT sequence FROM runs WHERE namespace = ? AND id = ?)")
		args = append(args, p.Namespace, p.Run)
	}
	after, err := store.ParseCursor(p.Cursor)
	if err != nil {
		return "", nil, 0, err
	}
	if after > 0 {
		where = append(where, "a.seq < ?")
		args = append(args, after)
	}
	query := `SELECT ` + approvalCols + approvalFrom + ` WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY a.seq DESC LIMIT ?`
	return query, append(args, limit+1), limit, nil
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
	r, err := approvalByID(context.Background(), tx, p.Namespace, p.ID)
	switch {
	case err != nil:
		return nil, err
	case r.Status != store.ApprovalPending:
		return nil, fmt.Errorf("%w: approval %q is %s", store.ErrApprovalDecided, p.ID, r.Status)
	case r.ExpiresAt != nil && !tx.now.Before(*r.ExpiresAt):
		return nil, fmt.Errorf("%w: approval %q expired at %v", store.ErrApprovalDecided, p.ID, *r.ExpiresAt)
	case r.runStatus.Terminal():
		return nil, fmt.Errorf("%w: run %q of approval %q is %s", store.ErrRunFinished, r.RunID, p.ID, r.runStatus)
	}
	a := r.Approval
	a.Status, a.Principal, a.Comment = store.ApprovalRejected, p.Principal, p.Comment
	if p.Approve {
		a.Status = store.ApprovalApproved
	}
	decided := fromNS(sql.NullInt64{Int64: tx.now.UnixNano(), Valid: true})
	a.DecidedAt = &decided
	if _, err := tx.exec(sqlApprovalSet, string(a.Status), a.Principal, a.Comment, decided.UnixNano(), r.seq); err != nil {
		return nil, fmt.Errorf("saving decision: %w", err)
	}
	payload, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	if _, _, _, err := deliver(tx, r.runSeq, store.ApprovalEvent(a.ID), payload, false); err != nil {
		return nil, err
	}
	return a, nil
}
