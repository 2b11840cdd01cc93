package trellis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// ErrApprovalTimeout: an approval request got no decision before its timeout.
var ErrApprovalTimeout = errors.New("approval timed out")

// Approval statuses.
const (
	ApprovalPending  = store.ApprovalPending
	ApprovalApproved = store.ApprovalApproved
	ApprovalRejected = store.ApprovalRejected
	ApprovalExpired  = store.ApprovalExpired
)

// ApprovalRecord is an approval request as clients see it.
type ApprovalRecord = store.Approval

// ApprovalStatus is the state of an approval request.
type ApprovalStatus = store.ApprovalStatus

// ApprovalList is one page of Client.Approvals.
type ApprovalList = store.ApprovalListResult

// ApprovalOptions describe an approval request.
type ApprovalOptions struct {
	// Approvers name who may decide (principals or roles). Recorded with the
	// request; the server's auth enforces them.
	Approvers []string
	// Subject is a one-line summary for the people deciding.
	Subject string
	// Details is any JSON-encodable value shown with the request.
	Details any
	// Timeout above zero ends the wait with ErrApprovalTimeout and marks the
	// request expired.
	Timeout time.Duration
}

// Decision is the decision on an approval request, as recorded in history.
type Decision struct {
	Approved  bool      `json:"approved"`
	Principal string    `json:"principal"`
	Comment   string    `json:"comment,omitempty"`
	DecidedAt time.Time `json:"decided_at"`
}

// ApprovalFuture is a pending approval request of the run.
type ApprovalFuture struct {
	wc    *Context
	pos   int
	name  string
	state approvalState
	op    *store.Op // the recorded decision, once settled
}

type approvalState struct {
	ID        string     `json:"id"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// RequestApproval creates an approval request (listed by Client.Approvals and
// decided by Client.Approve or Client.Reject) and returns at once.
func RequestApproval(wc *Context, name string, opts ApprovalOptions) *ApprovalFuture {
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(store.OpApproval, name)
	f := &ApprovalFuture{wc: wc, pos: pos, name: name}
	if rec != nil {
		if err := json.Unmarshal(rec.Result, &f.state); err != nil || f.state.ID == "" {
			// A settled op records the decision; its request state is in the
			// approval row, found by the same ID.
			f.state.ID = approvalID(rs.run.ID, pos)
		}
		if rec.Done {
			f.op = rec
		} else {
			rs.openApproval(f.state.ID, true)
		}
		return f
	}
	f.state.ID = approvalID(rs.run.ID, pos)
	req := &store.ApprovalRequest{ID: f.state.ID, Position: pos, Name: name, Approvers: opts.Approvers, Subject: opts.Subject}
	if opts.Details != nil {
		b, err := json.Marshal(opts.Details)
		if err != nil {
			b, _ = json.Marshal(fmt.Sprintf("unencodable details: %v", err))
		}
		req.Details = b
	}
	if opts.Timeout > 0 {
		at := rs.now().Add(opts.Timeout).UTC()
		f.state.ExpiresAt, req.ExpiresAt = &at, &at
	}
	rs.queueWait(func(w *queued) { w.approvals = append(w.approvals, req) })
	rs.openApproval(f.state.ID, true)
	b, _ := json.Marshal(f.state)
	rs.recordWait(pos, store.OpApproval, name, false, b, nil)
	return f
}

// Approval requests an approval and waits for the decision; the run holds no
// worker while it waits. A rejection is a Decision with Approved false, not an
// error; a timeout is ErrApprovalTimeout. The decision, its principal and time
// are recorded in history.
func Approval(wc *Context, name string, opts ApprovalOptions) (Decision, error) {
	return RequestApproval(wc, name, opts).Get(wc)
}

// openApproval tracks the run's undecided approval requests: those still open
// when the run ends are expired with its final checkpoint.
func (rs *runState) openApproval(id string, open bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.openApprovals == nil {
		rs.openApprovals = make(map[string]bool)
	}
	if open {
		rs.openApprovals[id] = true
	} else {
		delete(rs.openApprovals, id)
	}
}

func approvalID(runID string, pos int) string { return runID + ".approval." + strconv.Itoa(pos) }

// ID returns the approval request's ID.
func (f *ApprovalFuture) ID() string { return f.state.ID }

// Get waits for the decision.
func (f *ApprovalFuture) Get(wc *Context) (Decision, error) {
	if err := await(wc, f); err != nil {
		return Decision{}, err
	}
	if f.op.Error != nil {
		return Decision{}, fmt.Errorf("%w: %s", ErrApprovalTimeout, f.name)
	}
	var d Decision
	if err := json.Unmarshal(f.op.Result, &d); err != nil {
		return Decision{}, fmt.Errorf("decoding decision of %s: %w", f.name, err)
	}
	return d, nil
}

func (f *ApprovalFuture) waiterOf() waiter { return f }
func (f *ApprovalFuture) settled() bool    { return f.op != nil }

func (f *ApprovalFuture) try() bool {
	rs := f.wc.rs
	event := store.ApprovalEvent(f.state.ID)
	if e := rs.takeEvent(event); e != nil {
		var a store.Approval
		_ = json.Unmarshal(e.Payload, &a)
		d := Decision{Approved: a.Status == store.ApprovalApproved, Principal: a.Principal, Comment: a.Comment}
		if a.DecidedAt != nil {
			d.DecidedAt = *a.DecidedAt
		}
		b, _ := json.Marshal(d)
		f.op = rs.recordWait(f.pos, store.OpApproval, f.name, true, b, nil)
		rs.openApproval(f.state.ID, false)
		return true
	}
	if at := f.state.ExpiresAt; at != nil && !rs.now().Before(*at) {
		rs.queueWait(func(w *queued) {
			w.noEvents = append(w.noEvents, event)
			w.expire = append(w.expire, f.state.ID)
		})
		err := &typedError{msg: fmt.Sprintf("%s: %s", ErrApprovalTimeout, f.name), typ: "approval_timeout"}
		f.op = rs.recordWait(f.pos, store.OpApproval, f.name, true, nil, err)
		rs.openApproval(f.state.ID, false)
		return true
	}
	return false
}

func (f *ApprovalFuture) needs() (*time.Time, []string, string) {
	reason := fmt.Sprintf("waiting for approval %q (%s)", f.name, f.state.ID)
	if f.state.ExpiresAt != nil {
		reason += " until " + reasonTime(*f.state.ExpiresAt)
	}
	return f.state.ExpiresAt, []string{store.ApprovalEvent(f.state.ID)}, reason
}

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
