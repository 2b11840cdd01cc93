package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Approvals: created by a checkpoint, listed and decided by clients, the decision
// delivered to the run as an event.
var approvalCases = []testCase{
	{"CreatedByCheckpoint", approvalCreated},
	{"NotFound", approvalNotFound},
	{"Approve", approvalApprove},
	{"Reject", approvalReject},
	{"DecideTwice", approvalDecideTwice},
	{"PrincipalRequired", approvalPrincipalRequired},
	{"DecideAfterExpiry", approvalAfterExpiry},
	{"ExpireApprovals", approvalExpire},
	{"List", approvalList},
	{"DecideFinishedRun", approvalFinishedRun},
	{"TakenID", approvalTakenID},
}

// request returns an approval request with ID id at position 1.
func (e *env) request(id string) *store.ApprovalRequest {
	expires := e.clk.Now().Add(time.Hour)
	return &store.ApprovalRequest{ID: id, Position: 1, Name: "refund-over-1000",
		Approvers: []string{"alice", "role:finance"}, Subject: "Refund order 42",
		Details: []byte(`{"amount":1200}`), ExpiresAt: &expires}
}

// awaitApproval checkpoints cr waiting for the decision of new approvals.
func (e *env) awaitApproval(cr *store.ClaimedRun, reqs ...*store.ApprovalRequest) {
	e.t.Helper()
	var names []string
	for _, r := range reqs {
		names = append(names, store.ApprovalEvent(r.ID))
	}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "approval",
		WaitEvents: names, Approvals: reqs,
		Ops: []*store.Op{{Position: 1, Kind: store.OpApproval, Name: "refund-over-1000", StartedAt: e.clk.Now()}}})
}

func (e *env) approval(id string) *store.Approval {
	e.t.Helper()
	a, err := e.st.ApprovalGet(e.ctx, &store.ApprovalGetParams{Namespace: ns, ID: id})
	if err != nil {
		e.t.Fatalf("ApprovalGet(%s): %v", id, err)
	}
	return a
}

func (e *env) decide(id string, approve bool, principal string) (*store.Approval, error) {
	return e.st.ApprovalDecide(e.ctx, &store.ApprovalDecideParams{Namespace: ns, ID: id, Approve: approve,
		Principal: principal, Comment: "looks fine"})
}

func approvalCreated(t *testing.T, e *env) {
	cr := e.start()
	req := e.request("ap-1")
	e.awaitApproval(cr, req)
	a := e.approval("ap-1")
	if a.Namespace != ns || a.ID != "ap-1" || a.RunID != cr.Run.ID || a.Workflow != wf || a.Position != 1 ||
		a.Name != req.Name || !slices.Equal(a.Approvers, req.Approvers) || a.Subject != req.Subject ||
		string(a.Details) != string(req.Details) || a.Status != store.ApprovalPending ||
		a.Principal != "" || a.Comment != "" || a.DecidedAt != nil {
		t.Fatalf("ApprovalGet = %+v, want the pending request %+v of run %s", a, req, cr.Run.ID)
	}
	wantTime(t, "CreatedAt", a.CreatedAt, e.clk.Now())
	wantTimePtr(t, "ExpiresAt", a.ExpiresAt, *req.ExpiresAt)
	e.wantStatus(cr.Run.ID, store.StatusWaiting)
}

func approvalNotFound(t *testing.T, e *env) {
	_, err := e.st.ApprovalGet(e.ctx, &store.ApprovalGetParams{Namespace: ns, ID: "nope"})
	wantErr(t, "ApprovalGet of an unknown approval", err, store.ErrApprovalNotFound)
	_, err = e.decide("nope", true, "alice")
	wantErr(t, "ApprovalDecide of an unknown approval", err, store.ErrApprovalNotFound)
	cr := e.start()
	e.awaitApproval(cr, e.request("ap-1"))
	_, err = e.st.ApprovalGet(e.ctx, &store.ApprovalGetParams{Namespace: "other", ID: "ap-1"})
	wantErr(t, "ApprovalGet in another namespace", err, store.ErrApprovalNotFound)
}

// wantDecided checks a decision: returned, stored, and in the run's inbox with the
// run woken.
func (e *env) wantDecided(cr *store.ClaimedRun, id string, got *store.Approval, status store.ApprovalStatus) {
	e.t.Helper()
	for _, a := range []*store.Approval{got, e.approval(id)} {
		if a.Status != status || a.Principal != "alice" || a.Comment != "looks fine" || a.RunID != cr.Run.ID {
			e.t.Fatalf("decided approval = %+v, want %s by alice with the comment", a, status)
		}
		wantTimePtr(e.t, "DecidedAt", a.DecidedAt, e.clk.Now())
	}
	e.wantStatus(cr.Run.ID, store.StatusPending)
	again := e.claimOne(cr.Run.ID)
	if len(again.Inbox) != 1 || again.Inbox[0].Name != store.ApprovalEvent(id) {
		e.t.Fatalf("inbox = %v, want the decision of %s", inboxOf(again.Inbox), id)
	}
	var inEvent store.Approval
	if err := json.Unmarshal(again.Inbox[0].Payload, &inEvent); err != nil {
		e.t.Fatalf("decision payload %q: %v", again.Inbox[0].Payload, err)
	}
	if inEvent.ID != id || inEvent.Status != status || inEvent.Principal != "alice" ||
		inEvent.Comment != "looks fine" || inEvent.DecidedAt == nil {
		e.t.Fatalf("decision payload = %+v, want the decided approval", inEvent)
	}
}

func approvalApprove(t *testing.T, e *env) {
	cr := e.start()
	e.awaitApproval(cr, e.request("ap-1"))
	e.clk.Advance(time.Minute)
	ready := e.subscribe(store.TopicReady)
	a, err := e.decide("ap-1", true, "alice")
	if err != nil {
		t.Fatalf("ApprovalDecide: %v", err)
	}
	wantSignal(t, "TopicReady after a decision", ready)
	e.wantDecided(cr, "ap-1", a, store.ApprovalApproved)
}

func approvalReject(t *testing.T, e *env) {
	cr := e.start()
	e.awaitApproval(cr, e.request("ap-1"))
	a, err := e.decide("ap-1", false, "alice")
	if err != nil {
		t.Fatalf("ApprovalDecide: %v", err)
	}
	e.wantDecided(cr, "ap-1", a, store.ApprovalRejected)
}

func approvalDecideTwice(t *testing.T, e *env) {
	cr := e.start()
	e.awaitApproval(cr, e.request("ap-1"))
	if _, err := e.decide("ap-1", true, "alice"); err != nil {
		t.Fatalf("ApprovalDecide: %v", err)
	}
	_, err := e.decide("ap-1", false, "bob")
	wantErr(t, "ApprovalDecide of a decided approval", err, store.ErrApprovalDecided)
	if a := e.approval("ap-1"); a.Status != store.ApprovalApproved || a.Principal != "alice" {
		t.Fatalf("approval after a second decision = %+v, want the first kept", a)
	}
	if inbox := e.claimOne(cr.Run.ID).Inbox; len(inbox) != 1 {
		t.Fatalf("inbox = %v, want one decision", inboxOf(inbox))
	}
}

func approvalPrincipalRequired(t *testing.T, e *env) {
	cr := e.start()
	e.awaitApproval(cr, e.request("ap-1"))
	_, err := e.decide("ap-1", true, "")
	wantErr(t, "ApprovalDecide without a principal", err, store.ErrInvalidParams)
	if a := e.approval("ap-1"); a.Status != store.ApprovalPending {
		t.Fatalf("approval = %+v, want still pending", a)
	}
	e.wantStatus(cr.Run.ID, store.StatusWaiting)
}

func approvalAfterExpiry(t *testing.T, e *env) {
	cr := e.start()
	req := e.request("ap-1")
	e.awaitApproval(cr, req)
	e.clk.Set(*req.ExpiresAt)
	_, err := e.decide("ap-1", true, "alice")
	wantErr(t, "ApprovalDecide at ExpiresAt", err, store.ErrApprovalDecided)
	if a := e.approval("ap-1"); a.Status != store.ApprovalPending || a.DecidedAt != nil {
		t.Fatalf("approval = %+v: a rejected decision wrote", a)
	}
	e.wantStatus(cr.Run.ID, store.StatusWaiting)
}

func approvalExpire(t *testing.T, e *env) {
	cr := e.start()
	wake := e.clk.Now().Add(time.Hour)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "approval", WakeAt: &wake,
		WaitEvents: []string{store.ApprovalEvent("ap-1")}, Approvals: []*store.ApprovalRequest{e.request("ap-1"), e.request("ap-2")}})
	if _, err := e.decide("ap-2", true, "alice"); err != nil {
		t.Fatalf("ApprovalDecide: %v", err)
	}
	e.clk.Advance(time.Hour)
	again := e.claimOne(cr.Run.ID)
	e.checkpoint(again, store.CheckpointParams{Status: store.StatusRunning, ExpireApprovals: []string{"ap-1", "ap-2"}})
	a := e.approval("ap-1")
	if a.Status != store.ApprovalExpired {
		t.Fatalf("expired approval = %+v, want status expired", a)
	}
	if a := e.approval("ap-2"); a.Status != store.ApprovalApproved {
		t.Fatalf("ExpireApprovals changed a decided approval: %+v", a)
	}
	_, err := e.decide("ap-1", true, "alice")
	wantErr(t, "ApprovalDecide of an expired approval", err, store.ErrApprovalDecided)
}

func approvalIDs(as []*store.Approval) []string {
	ids := make([]string, 0, len(as))
	for _, a := range as {
		ids = append(ids, a.ID)
	}
	return ids
}

// listApprovals lists every approval matching p, page after page.
func (e *env) listApprovals(p store.ApprovalListParams) []string {
	e.t.Helper()
	p.Namespace = ns
	var ids []string
	for range 100 {
		res, err := e.st.ApprovalList(e.ctx, &p)
		if err != nil {
			e.t.Fatalf("ApprovalList(%+v): %v", p, err)
		}
		ids = append(ids, approvalIDs(res.Approvals)...)
		if res.NextCursor == "" {
			return ids
		}
		p.Cursor = res.NextCursor
	}
	e.t.Fatal("ApprovalList: cursor never ended")
	return nil
}

func approvalList(t *testing.T, e *env) {
	one, two := e.start(), e.start()
	for i, cr := range []*store.ClaimedRun{one, two, one} {
		e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning,
			Approvals: []*store.ApprovalRequest{e.request(fmt.Sprint("ap-", i))}})
	}
	if _, err := e.decide("ap-1", false, "alice"); err != nil {
		t.Fatalf("ApprovalDecide: %v", err)
	}
	wantIDs(t, "all, newest first", e.listApprovals(store.ApprovalListParams{Limit: 1}), []string{"ap-2", "ap-1", "ap-0"})
	wantIDs(t, "pending", e.listApprovals(store.ApprovalListParams{Statuses: []store.ApprovalStatus{store.ApprovalPending}}),
		[]string{"ap-2", "ap-0"})
	wantIDs(t, "of run one", e.listApprovals(store.ApprovalListParams{Run: one.Run.ID, Limit: 1}), []string{"ap-2", "ap-0"})
	wantIDs(t, "rejected of run two", e.listApprovals(store.ApprovalListParams{Run: two.Run.ID,
		Statuses: []store.ApprovalStatus{store.ApprovalRejected}}), []string{"ap-1"})
	res, err := e.st.ApprovalList(e.ctx, &store.ApprovalListParams{Namespace: "other"})
	if err != nil || len(res.Approvals) != 0 || res.NextCursor != "" {
		t.Fatalf("ApprovalList of another namespace = %+v, %v; want an empty page", res, err)
	}
	_, err = e.st.ApprovalList(e.ctx, &store.ApprovalListParams{Namespace: ns, Cursor: "garbage"})
	wantErr(t, "ApprovalList with a malformed cursor", err, store.ErrInvalidParams)
	_, err = e.st.ApprovalList(e.ctx, &store.ApprovalListParams{Namespace: ns, Statuses: []store.ApprovalStatus{"maybe"}})
	wantErr(t, "ApprovalList with an unknown status", err, store.ErrInvalidParams)
}

func approvalFinishedRun(t *testing.T, e *env) {
	cr := e.start()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Approvals: []*store.ApprovalRequest{e.request("ap-1")}})
	e.finish(cr)
	_, err := e.decide("ap-1", true, "alice")
	wantErr(t, "ApprovalDecide when the run has finished", err, store.ErrRunFinished)
	if a := e.approval("ap-1"); a.Status != store.ApprovalPending {
		t.Fatalf("approval = %+v, want still pending", a)
	}
}

func approvalTakenID(t *testing.T, e *env) {
	first := e.start()
	e.checkpoint(first, store.CheckpointParams{Status: store.StatusRunning, Approvals: []*store.ApprovalRequest{e.request("ap-1")}})
	cr := e.start()
	p := e.everything()
	p.Approvals = []*store.ApprovalRequest{e.request("ap-0"), e.request("ap-1")}
	wantErr(t, "Checkpoint creating an approval with a taken ID", e.checkpointErr(cr, p), store.ErrInvalidParams)
	e.wantUntouched(cr.Run.ID)
	_, err := e.st.ApprovalGet(e.ctx, &store.ApprovalGetParams{Namespace: ns, ID: "ap-0"})
	wantErr(t, "ApprovalGet of an approval of a rejected checkpoint", err, store.ErrApprovalNotFound)
	if a := e.approval("ap-1"); a.RunID != first.Run.ID {
		t.Fatalf("approval ap-1 = %+v, want the first run's", a)
	}
}
