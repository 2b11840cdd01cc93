package storetest

import (
	"bytes"
	"errors"
	"strings"
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
	{"Claimed", createClaimed},
	{"ClaimedExpires", createClaimedExpires},
	{"ClaimIgnored", createClaimIgnored},
	{"ClaimInvalid", createClaimInvalid},
	{"TraceParent", createTraceParent},
	{"QueueCounts", createQueueCounts},
}

func withClaim(worker string) runOpt {
	return func(p *store.RunCreateParams) {
		p.Claim = &store.CreateClaim{Worker: worker, LeaseDuration: leaseDur}
	}
}

// createClaimed creates a run already claimed: running, attempt 1, leased, with a
// working token, and not claimable by anyone else.
func createClaimed(t *testing.T, e *env) {
	now := e.clk.Advance(time.Second)
	p := e.params(withClaim("local"))
	res, err := e.st.RunCreate(e.ctx, p)
	if err != nil {
		t.Fatalf("RunCreate with Claim: %v", err)
	}
	cr := res.Claimed
	if !res.Created || cr == nil || cr.Run != res.Run || cr.LeaseToken == 0 || cr.History == nil || len(cr.History) != 0 {
		t.Fatalf("RunCreate with Claim = %+v, want a created run with its lease and empty history", res)
	}
	wantTime(t, "LeaseExpiresAt", cr.LeaseExpiresAt, now.Add(leaseDur))
	for _, got := range []*store.Run{res.Run, e.get(p.ID)} {
		if got.Status != store.StatusRunning || got.Attempts != 1 || got.LeaseOwner != "local" || got.StartedAt == nil {
			t.Fatalf("claimed run = %+v, want running, attempt 1, leased by local, started", got)
		}
		wantTimePtr(t, "Run.LeaseExpiresAt", got.LeaseExpiresAt, now.Add(leaseDur))
		wantTime(t, "CreatedAt", got.CreatedAt, now)
	}
	e.wantNoClaim()
	e.finish(cr)
	e.wantStatus(p.ID, store.StatusSucceeded)
}

// createClaimedExpires lets a create-time lease expire: the run is claimed again
// with a higher token, and the first token is stale.
func createClaimedExpires(t *testing.T, e *env) {
	res, err := e.st.RunCreate(e.ctx, e.params(withClaim("local")))
	if err != nil || res.Claimed == nil {
		t.Fatalf("RunCreate with Claim = %+v, %v", res, err)
	}
	first := res.Claimed
	e.clk.Advance(leaseDur)
	second := e.claimOne(first.Run.ID, claimBy("worker-2"))
	if second.LeaseToken <= first.LeaseToken || second.Run.Attempts != 2 {
		t.Fatalf("reclaimed = token %d attempt %d, want token > %d and attempt 2", second.LeaseToken, second.Run.Attempts, first.LeaseToken)
	}
	err = e.checkpointErr(first, store.CheckpointParams{Status: store.StatusRunning})
	wantErr(t, "Checkpoint with the create-time token", err, store.ErrLeaseLost)
}

// createClaimIgnored: no claim for an existing run returned by
// ReuseReturnExisting, nor for a run not yet available.
func createClaimIgnored(t *testing.T, e *env) {
	first := e.create(withWorkflowID("k"))
	res, err := e.st.RunCreate(e.ctx, e.params(withWorkflowID("k"), withReuse(store.ReuseReturnExisting), withClaim("local")))
	if err != nil || res.Created || res.Claimed != nil || res.Run.ID != first.ID {
		t.Fatalf("RunCreate(return existing, claim) = %+v, %v; want run %s, not created, not claimed", res, err, first.ID)
	}
	e.wantStatus(first.ID, store.StatusPending)
	later := e.clk.Now().Add(time.Minute)
	res, err = e.st.RunCreate(e.ctx, e.params(withAvailableAt(later), withClaim("local")))
	if err != nil || !res.Created || res.Claimed != nil || res.Run.Status != store.StatusPending {
		t.Fatalf("RunCreate(available later, claim) = %+v, %v; want a pending run, not claimed", res, err)
	}
}

func createClaimInvalid(t *testing.T, e *env) {
	for name, c := range map[string]*store.CreateClaim{
		"no worker":         {LeaseDuration: leaseDur},
		"no lease duration": {Worker: "local"},
	} {
		p := e.params()
		p.Claim = c
		_, err := e.st.RunCreate(e.ctx, p)
		wantErr(t, "RunCreate with a claim with "+name, err, store.ErrInvalidParams)
	}
	if ids := e.listIDs(store.RunListParams{}); len(ids) != 0 {
		t.Fatalf("rejected creates left runs %v", ids)
	}
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
	// The error names the workflow ID that is taken (a caller chose it; the run
	// ID was likely generated).
	if !strings.Contains(err.Error(), `has workflow ID "order-1"`) {
		t.Errorf("second start while pending: %v, want the workflow ID named", err)
	}
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
	if !strings.Contains(err.Error(), `has workflow ID "once" (reuse policy "reject")`) {
		t.Errorf("ReuseReject while running: %v, want the policy and the workflow ID named", err)
	}
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

// createTraceParent stores the trace context a run was started with and returns
// it with the run, when it is claimed and when it is read; one too long is refused.
func createTraceParent(t *testing.T, e *env) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	p := e.params(func(p *store.RunCreateParams) { p.TraceParent = tp })
	res, err := e.st.RunCreate(e.ctx, p)
	if err != nil {
		t.Fatalf("RunCreate with TraceParent: %v", err)
	}
	if res.Run.TraceParent != tp || e.get(p.ID).TraceParent != tp {
		t.Fatalf("TraceParent = %q / %q, want %q", res.Run.TraceParent, e.get(p.ID).TraceParent, tp)
	}
	claimed, err := e.st.RunsClaim(e.ctx, &store.RunsClaimParams{Namespace: p.Namespace, Workflows: []string{p.Workflow},
		Worker: "w", Max: 1, LeaseDuration: leaseDur})
	if err != nil || len(claimed.Runs) != 1 || claimed.Runs[0].Run.TraceParent != tp {
		t.Fatalf("RunsClaim = %+v, %v; want the run with its TraceParent", claimed, err)
	}
	bad := e.params(func(p *store.RunCreateParams) { p.TraceParent = string(bytes.Repeat([]byte("a"), 129)) })
	if _, err := e.st.RunCreate(e.ctx, bad); !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("RunCreate with a 129-byte TraceParent: %v, want ErrInvalidParams", err)
	}
}

// createQueueCounts counts unfinished runs by namespace, queue and status
// (stores that implement store.QueueCounter); finished runs are not counted.
func createQueueCounts(t *testing.T, e *env) {
	rc, ok := e.st.(store.QueueCounter)
	if !ok {
		t.Skip("the store does not count runs")
	}
	e.claimOne(e.create(withQueue("qc")).ID)
	e.finish(e.claimOne(e.create(withQueue("qd")).ID))
	for range 2 {
		e.create(withQueue("qa"))
	}
	e.create(withQueue("qb"))
	got, err := rc.QueueCounts(e.ctx)
	if err != nil {
		t.Fatalf("QueueCounts: %v", err)
	}
	want := map[store.QueueCount]bool{
		{Namespace: ns, Queue: "qa", Status: store.StatusPending, Count: 2}: true,
		{Namespace: ns, Queue: "qb", Status: store.StatusPending, Count: 1}: true,
		{Namespace: ns, Queue: "qc", Status: store.StatusRunning, Count: 1}: true,
	}
	if len(got) != len(want) {
		t.Fatalf("QueueCounts = %+v, want %v", got, want)
	}
	for _, c := range got {
		if !want[c] {
			t.Fatalf("QueueCounts = %+v, want %v", got, want)
		}
	}
}
