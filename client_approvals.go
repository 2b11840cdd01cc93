package trellis

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// ApprovalRecord is an approval request as clients see it.
type ApprovalRecord = store.Approval

// ApprovalStatus is the state of an approval request.
type ApprovalStatus = store.ApprovalStatus

// ApprovalList is one page of Client.Approvals.
type ApprovalList = store.ApprovalListResult

// Approval statuses.
const (
	ApprovalPending  = store.ApprovalPending
	ApprovalApproved = store.ApprovalApproved
	ApprovalRejected = store.ApprovalRejected
	ApprovalExpired  = store.ApprovalExpired
)

// ApprovalFilter filters Client.Approvals. Zero fields do not filter.
type ApprovalFilter struct {
	Statuses []ApprovalStatus
	// Run is a run ID.
	Run    string
	Limit  int
	Cursor string
}

// Approvals lists approval requests, newest first.
func (c *Client) Approvals(ctx context.Context, f ApprovalFilter) (*ApprovalList, error) {
	res, err := c.store.ApprovalList(ctx, &store.ApprovalListParams{Namespace: c.cfg.Namespace,
		Statuses: f.Statuses, Run: f.Run, Limit: f.Limit, Cursor: f.Cursor})
	if err != nil {
		return nil, fmt.Errorf("listing approvals: %w", err)
	}
	return res, nil
}

// GetApproval returns one approval request by ID.
func (c *Client) GetApproval(ctx context.Context, id string) (*ApprovalRecord, error) {
	a, err := c.store.ApprovalGet(ctx, &store.ApprovalGetParams{Namespace: c.cfg.Namespace, ID: id})
	if err != nil {
		return nil, fmt.Errorf("getting approval %s: %w", id, err)
	}
	return a, nil
}

// Approve approves a pending request as principal, with an optional comment;
// the run resumes. ErrApprovalDecided when it was already decided or expired.
func (c *Client) Approve(ctx context.Context, id, principal, comment string) (*ApprovalRecord, error) {
	return c.decide(ctx, id, true, principal, comment)
}

// Reject rejects a pending request as principal; see Approve.
func (c *Client) Reject(ctx context.Context, id, principal, comment string) (*ApprovalRecord, error) {
	return c.decide(ctx, id, false, principal, comment)
}

func (c *Client) decide(ctx context.Context, id string, approve bool, principal, comment string) (*ApprovalRecord, error) {
	a, err := c.store.ApprovalDecide(ctx, &store.ApprovalDecideParams{Namespace: c.cfg.Namespace, ID: id,
		Approve: approve, Principal: principal, Comment: comment})
	if err != nil {
		return nil, fmt.Errorf("deciding approval %s: %w", id, err)
	}
	return a, nil
}
