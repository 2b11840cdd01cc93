package trellis

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/engine"
)

// ErrApprovalTimeout: an approval request got no decision before its timeout.
var ErrApprovalTimeout = engine.ErrApprovalTimeout

// ApprovalOptions describe an approval request.
type ApprovalOptions struct {
	// Approvers name who may decide (principals). trellis server enforces
	// them: a decision through it is the token's principal's, and must be one of
	// these when any are named. An embedded Client.Approve trusts the principal
	// it is given.
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
	w    engine.ApprovalWait
	name string
}

// RequestApproval creates an approval request (listed by Client.Approvals and
// decided by Client.Approve or Client.Reject) and returns at once.
func RequestApproval(wc *Context, name string, opts ApprovalOptions) *ApprovalFuture {
	f := &ApprovalFuture{name: name}
	wc.rs.RequestApproval(&f.w, name, engine.ApprovalSpec{Approvers: opts.Approvers, Subject: opts.Subject,
		Details: opts.Details, Timeout: opts.Timeout})
	return f
}

// Approval requests an approval and waits for the decision; the run holds no
// worker while it waits. A rejection is a Decision with Approved false, not an
// error; a timeout is ErrApprovalTimeout. The decision, its principal and time
// are recorded in history.
func Approval(wc *Context, name string, opts ApprovalOptions) (Decision, error) {
	return RequestApproval(wc, name, opts).Get(wc)
}

// ID returns the approval request's ID.
func (f *ApprovalFuture) ID() string { return f.w.ID() }

// Get waits for the decision.
func (f *ApprovalFuture) Get(wc *Context) (Decision, error) {
	if err := wc.rs.Await(&f.w, wc.detached); err != nil {
		return Decision{}, err
	}
	op := f.w.Op()
	if op.Error != nil {
		return Decision{}, fmt.Errorf("%w: %s", ErrApprovalTimeout, f.name)
	}
	var d Decision
	if err := json.Unmarshal(op.Result, &d); err != nil {
		return Decision{}, fmt.Errorf("decoding decision of %s: %w", f.name, err)
	}
	return d, nil
}

func (f *ApprovalFuture) waiterOf() engine.Waiter { return &f.w }
