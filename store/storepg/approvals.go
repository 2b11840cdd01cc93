package storepg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/store"
)

const (
	sqlApprovalInsert = `INSERT INTO approvals (namespace, id, run_seq, position, name, approvers,
	subject, details, status, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9, $10)`
	sqlApprovalsExpire = `UPDATE approvals SET status = 'expired', decided_at = $1
	WHERE run_seq = $2 AND status = 'pending' AND id = ANY($3::text[])`
	// approvalCols are the columns scanApproval reads, then the approval's seq, its
	// run's sequence and status.
	approvalCols = `a.namespace, a.id, r.id, r.workflow, a.position, a.name, a.approvers,
	a.subject, a.details, a.status, a.principal, a.comment, a.created_at, a.expires_at,
	a.decided_at, a.seq, a.run_seq, r.status`
	approvalFrom   = ` FROM approvals a JOIN runs r ON r.sequence = a.run_seq`
	sqlApprovalGet = `SELECT ` + approvalCols + approvalFrom + ` WHERE a.namespace = $1 AND a.id = $2`
	// sqlApprovalLock is sqlApprovalGet locking the approval and its run (every
	// transaction that adds to an inbox locks the run).
	sqlApprovalLock = sqlApprovalGet + ` FOR NO KEY UPDATE OF r, a`
	sqlApprovalSet  = `UPDATE approvals SET status = $1, principal = $2, comment = $3, decided_at = $4
	WHERE seq = $5`
)

// approvalRow is an approval with the keys of its row and its run's status.
type approvalRow struct {
	*store.Approval
	seq, runSeq int64
	runStatus   store.Status
}

func scanApproval(sc scanner) (*approvalRow, error) {
	var (
		a                 store.Approval
		r                 approvalRow
		status, runStatus string
		created           time.Time
		expires, decided  *time.Time
	)
	err := sc.Scan(&a.Namespace, &a.ID, &a.RunID, &a.Workflow, &a.Position, &a.Name, &a.Approvers,
		&a.Subject, &a.Details, &status, &a.Principal, &a.Comment, &created, &expires, &decided,
		&r.seq, &r.runSeq, &runStatus)
	if err != nil {
		return nil, err
	}
	a.Status, a.CreatedAt = store.ApprovalStatus(status), created.UTC()
	a.ExpiresAt, a.DecidedAt = utcPtr(expires), utcPtr(decided)
	r.Approval, r.runStatus = &a, store.Status(runStatus)
	return &r, nil
}

// ApprovalGet implements store.Store.
func (s *Store) ApprovalGet(ctx context.Context, p *store.ApprovalGetParams) (*store.Approval, error) {
	if s.closed() {
		return nil, fmt.Errorf("getting approval: %w", store.ErrClosed)
	}
	var r *approvalRow
	err := s.read(ctx, func() (err error) {
		r, err = scanApproval(s.pool.QueryRow(ctx, sqlApprovalGet, p.Namespace, p.ID))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("getting approval: %w", approvalNotFound(p.Namespace, p.ID))
	}
	if err != nil {
		return nil, fmt.Errorf("getting approval: %w", s.readErr(err))
	}
	return r.Approval, nil
}

func approvalNotFound(namespace, id string) error {
	return fmt.Errorf("%w: %q in namespace %q", store.ErrApprovalNotFound, id, namespace)
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
	var page []*approvalRow
	err = s.read(ctx, func() error {
		page = page[:0]
		rows, err := s.pool.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanApproval(rows)
			if err != nil {
				return err
			}
			page = append(page, r)
		}
		return rows.Err()
	})
	if err != nil {
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
	var args argList
	where := []string{"a.namespace = " + args.add(p.Namespace)}
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
		where = append(where, "a.status = ANY("+args.add(sts)+"::text[])")
	}
	if p.Run != "" {
		where = append(where, "a.run_seq = (SELECT sequence FROM runs WHERE namespace = a.namespace AND id = "+
			args.add(p.Run)+")")
	}
	after, err := store.ParseCursor(p.Cursor)
	if err != nil {
		return "", nil, 0, err
	}
	if after > 0 {
		where = append(where, "a.seq < "+args.add(after))
	}
	query := `SELECT ` + approvalCols + approvalFrom + ` WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY a.seq DESC LIMIT ` + args.add(limit+1)
	return query, args, limit, nil
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
	r, err := scanApproval(tx.queryRow(sqlApprovalLock, p.Namespace, p.ID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, approvalNotFound(p.Namespace, p.ID)
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
	decided := tx.now.UTC()
	a.DecidedAt = &decided
	if _, err := tx.exec(sqlApprovalSet, string(a.Status), a.Principal, a.Comment, decided, r.seq); err != nil {
		return nil, fmt.Errorf("saving decision: %w", err)
	}
	payload, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	if _, _, err := deliver(tx, r.runSeq, store.ApprovalEvent(a.ID), payload); err != nil {
		return nil, err
	}
	return a, nil
}
