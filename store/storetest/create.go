package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var createCases = []testCase{
	{"RequiredFields", createRequiredFields},
	{"Defaults", createDefaults},
	{"RoundTrip", createRoundTrip},
	{"SequenceIncreases", createSequenceIncreases},
	{"DuplicateID", createDuplicateID},
	{"RejectActiveDefault", createRejectActive},
	{"RejectActiveWhileWaitingOrBlocked", createRejectActiveStates},
	{"Reject", createReject},
	{"ReturnExisting", createReturnExisting},
	{"NamespacesIndependent", createNamespacesIndependent},
}

func createRequiredFields(t *testing.T, e *env) {
	for _, c := range []struct {
		field string
		clear runOpt
	}{
		{"Namespace", func(p *store.RunCreateParams) { p.Namespace = "" }},
		{"ID", func(p *store.RunCreateParams) { p.ID = "" }},
		{"WorkflowID", func(p *store.RunCreateParams) { p.WorkflowID = "" }},
		{"Workflow", func(p *store.RunCreateParams) { p.Workflow = "" }},
		{"Queue", func(p *store.RunCreateParams) { p.Queue = "" }},
	} {
		p := e.params(c.clear)
		_, err := e.st.RunCreate(e.ctx, p)
		wantErr(t, "RunCreate without "+c.field, err, store.ErrInvalidParams)
	}
	if ids := e.listIDs(store.RunListParams{}); len(ids) != 0 {
		t.Fatalf("rejected creates left runs %v", ids)
	}
	e.wantNoClaim()
}

func createDefaults(t *testing.T, e *env) {
	now := e.clk.Advance(time.Second)
	r := e.create()
	for _, got := range []*store.Run{r, e.get(r.ID)} {
		if got.Status != store.StatusPending {
			t.Fatalf("new run status = %s, want pending", got.Status)
		}
		wantTime(t, "AvailableAt", got.AvailableAt, now)
		wantTime(t, "CreatedAt", got.CreatedAt, now)
		if got.Attempts != 0 || got.LeaseOwner != "" || got.LeaseExpiresAt != nil ||
			got.StartedAt != nil || got.FinishedAt != nil || got.CancelRequested || got.Error != nil {
			t.Fatalf("new run = %+v, want no attempts, lease, start, finish, cancel or error", got)
		}
	}
}

func createRoundTrip(t *testing.T, e *env) {
	deadline := e.clk.Now().Add(time.Hour)
	avail := e.clk.Now().Add(time.Minute)
	p := e.params(withQueue("emails"), withPriority(7), withAvailableAt(avail), withWorkflow("send"))
	p.Version = 3
	p.Input = []byte(`{"to":"a@example.com"}`)
	p.Deadline = &deadline
	res, err := e.st.RunCreate(e.ctx, p)
	if err != nil {
		t.Fatalf("RunCreate: %v", err)
	}
	for _, got := range []*store.Run{res.Run, e.get(p.ID)} {
		if got.Namespace != ns || got.ID != p.ID || got.WorkflowID != p.WorkflowID ||
			got.Workflow != "send" || got.Queue != "emails" || got.Priority != 7 || got.Version != 3 {
			t.Fatalf("run = %+v, want the fields of %+v", got, p)
		}
		if !bytes.Equal(got.Input, p.Input) {
			t.Fatalf("Input = %q, want %q", got.Input, p.Input)
		}
		wantTimePtr(t, "Deadline", got.Deadline, deadline)
		wantTime(t, "AvailableAt", got.AvailableAt, avail)
	}
}

func createSequenceIncreases(t *testing.T, e *env) {
	var last int64
	for i := range 6 {
		n := ns
		if i%2 == 1 {
			n = "other"
		}
		r := e.create(withNamespace(n))
		if i > 0 && r.Sequence <= last {
			t.Fatalf("run %d: Sequence = %d, want > %d", i, r.Sequence, last)
		}
		if got := e.getIn(n, r.ID).Sequence; got != r.Sequence {
			t.Fatalf("RunGet Sequence = %d, RunCreate returned %d", got, r.Sequence)
		}
		last = r.Sequence
	}
}

func createDuplicateID(t *testing.T, e *env) {
	first := e.create()
	p := e.params(withID(first.ID), withWorkflow("other"))
	_, err := e.st.RunCreate(e.ctx, p)
	wantErr(t, "RunCreate with a used run ID", err, store.ErrRunExists)
	got := e.get(first.ID)
	if got.WorkflowID != first.WorkflowID || got.Workflow != wf {
		t.Fatalf("run after rejected duplicate = %+v, want unchanged %+v", got, first)
	}
	wantIDSet(t, "runs", e.listIDs(store.RunListParams{}), []string{first.ID})
}

func createRejectActive(t *testing.T, e *env) {
	first := e.create(withWorkflowID("order-1"))
	_, err := e.st.RunCreate(e.ctx, e.params(withWorkflowID("order-1")))
	wantErr(t, "second start while pending", err, store.ErrRunExists)
	cr := e.claimOne(first.ID)
	_, err = e.st.RunCreate(e.ctx, e.params(withWorkflowID("order-1")))
	wantErr(t, "second start while running", err, store.ErrRunExists)
	wantIDSet(t, "runs while active", e.listIDs(store.RunListParams{}), []string{first.ID})

	e.finish(cr)
	second := e.create(withWorkflowID("order-1"))
	_, err = e.st.RunCreate(e.ctx, e.params(withWorkflowID("order-1")))
	wantErr(t, "third start while the second is pending", err, store.ErrRunExists)
	wantIDSet(t, "runs", e.listIDs(store.RunListParams{}), []string{second.ID, first.ID})
}

func createRejectActiveStates(t *testing.T, e *env) {
	waiting := e.start(withWorkflowID("w"))
	e.checkpoint(waiting, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event"})
	blocked := e.start(withWorkflowID("b"))
	e.block(blocked)
	for _, key := range []string{"w", "b"} {
		_, err := e.st.RunCreate(e.ctx, e.params(withWorkflowID(key)))
		wantErr(t, "start of workflow ID "+key, err, store.ErrRunExists)
	}
	wantIDSet(t, "runs", e.listIDs(store.RunListParams{}), []string{blocked.Run.ID, waiting.Run.ID})
}

func createReject(t *testing.T, e *env) {
	cr := e.start(withWorkflowID("once"), withReuse(store.ReuseReject))
	_, err := e.st.RunCreate(e.ctx, e.params(withWorkflowID("once"), withReuse(store.ReuseReject)))
	wantErr(t, "ReuseReject while running", err, store.ErrRunExists)
	e.finish(cr)
	_, err = e.st.RunCreate(e.ctx, e.params(withWorkflowID("once"), withReuse(store.ReuseReject)))
	wantErr(t, "ReuseReject after it finished", err, store.ErrRunExists)
	wantIDSet(t, "runs", e.listIDs(store.RunListParams{}), []string{cr.Run.ID})
}

func createReturnExisting(t *testing.T, e *env) {
	first := e.create(withWorkflowID("k"), withReuse(store.ReuseReturnExisting))
	p := e.params(withWorkflowID("k"), withReuse(store.ReuseReturnExisting))
	res, err := e.st.RunCreate(e.ctx, p)
	if err != nil {
		t.Fatalf("RunCreate(return existing): %v", err)
	}
	if res.Created || res.Run == nil || res.Run.ID != first.ID {
		t.Fatalf("RunCreate(return existing) = %+v, want run %s with Created=false", res, first.ID)
	}
	_, err = e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: p.ID})
	wantErr(t, "RunGet of the run not created", err, store.ErrRunNotFound)

	e.finish(e.claimOne(first.ID))
	second := e.create(withWorkflowID("k"))
	e.finish(e.claimOne(second.ID))
	res, err = e.st.RunCreate(e.ctx, e.params(withWorkflowID("k"), withReuse(store.ReuseReturnExisting)))
	if err != nil || res.Created || res.Run.ID != second.ID || res.Run.Status != store.StatusSucceeded {
		t.Fatalf("RunCreate(return existing) = %+v, %v; want the latest run %s, finished, not created", res, err, second.ID)
	}
	wantIDSet(t, "runs", e.listIDs(store.RunListParams{}), []string{second.ID, first.ID})
}

func createNamespacesIndependent(t *testing.T, e *env) {
	a := e.create(withWorkflowID("shared"))
	b := e.create(withWorkflowID("shared"), withNamespace("other"))
	if got := e.getIn("other", "shared"); got.ID != b.ID {
		t.Fatalf("RunGet(other/shared) = %s, want %s", got.ID, b.ID)
	}
	if got := e.get("shared"); got.ID != a.ID {
		t.Fatalf("RunGet(ns/shared) = %s, want %s", got.ID, a.ID)
	}
	_, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: "other", Ref: a.ID})
	wantErr(t, "RunGet of a run of another namespace", err, store.ErrRunNotFound)
	wantIDs(t, "runs of ns", e.listIDs(store.RunListParams{}), []string{a.ID})
	wantIDs(t, "runs of other", e.listIDs(store.RunListParams{Namespace: "other"}), []string{b.ID})
}
