package trellis

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
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
	return callV(ctx, c, ClientCall{Method: "Approvals", Ref: f.Run}, func(ctx context.Context) (*ApprovalList, error) {
		page, err := c.b.approvals(ctx, f)
		if err != nil {
			return nil, opErr("listing approvals", err)
		}
		return page, nil
	})
}

// GetApproval returns one approval request by ID.
func (c *Client) GetApproval(ctx context.Context, id string) (*ApprovalRecord, error) {
	return callV(ctx, c, ClientCall{Method: "GetApproval", Ref: id}, func(ctx context.Context) (*ApprovalRecord, error) {
		a, err := c.b.getApproval(ctx, id)
		if err != nil {
			return nil, opErr(fmt.Sprintf("getting approval %q", id), err)
		}
		return a, nil
	})
}

// Approve approves a pending request as principal, with an optional comment;
// the run resumes. ErrApprovalDecided when it was already decided or expired.
// Through a server, the principal is the token's and the argument is ignored.
func (c *Client) Approve(ctx context.Context, id, principal, comment string) (*ApprovalRecord, error) {
	return c.decide(ctx, id, true, principal, comment)
}

// Reject rejects a pending request as principal; see Approve.
func (c *Client) Reject(ctx context.Context, id, principal, comment string) (*ApprovalRecord, error) {
	return c.decide(ctx, id, false, principal, comment)
}

func (c *Client) decide(ctx context.Context, id string, approve bool, principal, comment string) (*ApprovalRecord, error) {
	method := "Reject"
	if approve {
		method = "Approve"
	}
	return callV(ctx, c, ClientCall{Method: method, Ref: id}, func(ctx context.Context) (*ApprovalRecord, error) {
		a, err := c.b.decide(ctx, id, approve, principal, comment)
		if err != nil {
			return nil, opErr(fmt.Sprintf("deciding approval %q", id), err)
		}
		return a, nil
	})
}

func approvalStatusesToStore(ss []ApprovalStatus) []store.ApprovalStatus {
	out := make([]store.ApprovalStatus, len(ss))
	for i, s := range ss {
		out[i] = store.ApprovalStatus(s)
	}
	return out
}
