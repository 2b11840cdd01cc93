package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// ApprovalSpec describes an approval request.
type ApprovalSpec struct {
	Approvers []string
	Subject   string
	Details   any // JSON-encoded with the request
	Timeout   time.Duration
}

// Decision is the decision on an approval request as recorded in history.
type Decision struct {
	Approved  bool      `json:"approved"`
	Principal string    `json:"principal"`
	Comment   string    `json:"comment,omitempty"`
	DecidedAt time.Time `json:"decided_at"`
}

// ApprovalWait is a pending approval request of the run.
type ApprovalWait struct {
	rs    *RunState
	pos   int
	name  string
	state approvalState
	op    *store.Op // the recorded decision (a Decision), once settled
}

type approvalState struct {
	ID        string     `json:"id"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// RequestApproval creates the approval request f, saved with the next checkpoint.
func (rs *RunState) RequestApproval(f *ApprovalWait, name string, spec ApprovalSpec) {
	rs.checkUnwind()
	pos, rec := rs.next(store.OpApproval, name)
	f.rs, f.pos, f.name = rs, pos, name
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
		return
	}
	f.state.ID = approvalID(rs.run.ID, pos)
	req := &store.ApprovalRequest{ID: f.state.ID, Position: pos, Name: name, Approvers: spec.Approvers, Subject: spec.Subject}
	if spec.Details != nil {
		b, err := json.Marshal(spec.Details)
		if err != nil {
			b, _ = json.Marshal(fmt.Sprintf("unencodable details: %v", err))
		}
		req.Details = b
	}
	if spec.Timeout > 0 {
		at := rs.now().Add(spec.Timeout).UTC()
		f.state.ExpiresAt, req.ExpiresAt = &at, &at
	}
	rs.queueWait(func(w *queued) { w.approvals = append(w.approvals, req) })
	rs.openApproval(f.state.ID, true)
	b, _ := json.Marshal(f.state)
	rs.recordWait(pos, store.OpApproval, name, false, b, nil)
}

// openApproval tracks the run's undecided approval requests: those still open
// when the run ends are expired with its final checkpoint.
func (rs *RunState) openApproval(id string, open bool) {
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
func (f *ApprovalWait) ID() string { return f.state.ID }

// Op returns the recorded decision once the wait settled, or an error when it
// timed out.
func (f *ApprovalWait) Op() *store.Op { return f.op }

func (f *ApprovalWait) settled() bool { return f.op != nil }

func (f *ApprovalWait) try() bool {
	rs := f.rs
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
		err := &TypedError{Msg: fmt.Sprintf("%s: %s", ErrApprovalTimeout, f.name), Type: TypeApprovalTimeout}
		f.op = rs.recordWait(f.pos, store.OpApproval, f.name, true, nil, err)
		rs.openApproval(f.state.ID, false)
		return true
	}
	return false
}

func (f *ApprovalWait) needs() (*time.Time, []string, string) {
	reason := fmt.Sprintf("waiting for approval %q (%s)", f.name, f.state.ID)
	if f.state.ExpiresAt != nil {
		reason += " until " + reasonTime(*f.state.ExpiresAt)
	}
	return f.state.ExpiresAt, []string{store.ApprovalEvent(f.state.ID)}, reason
}
