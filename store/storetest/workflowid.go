package storetest

import (
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// A run started without a workflow ID takes its run ID as workflow ID (the
// client's Start does so). A store may index such runs apart from those started
// with one (both SQL drivers leave them out of their workflow-ID indexes:
// Postgres' migration 0019, SQLite's 0029), but every rule and every lookup by
// workflow ID must treat them alike.
var workflowIDCases = []testCase{
	{"ImplicitFoundByWorkflowID", wfidImplicitFound},
	{"ExplicitOnActiveImplicit", wfidExplicitOnActiveImplicit},
	{"BatchExplicitOnActiveImplicit", wfidBatchExplicitOnActiveImplicit},
	{"ChildExplicitOnActiveImplicit", wfidChildExplicitOnActiveImplicit},
}

// implicit makes the run one started without a workflow ID: its workflow ID is
// its run ID.
func implicit() runOpt { return func(p *store.RunCreateParams) { p.WorkflowID = p.ID } }

// wfidImplicitFound: a run started without a workflow ID is found by it (its
// run ID) by a list, by each reuse policy, and by a ref.
func wfidImplicitFound(t *testing.T, e *env) {
	a := e.create(implicit())
	e.create(implicit())
	if got := e.get(a.ID); got.ID != a.ID || got.WorkflowID != a.ID {
		t.Fatalf("RunGet(%s) = run %s with workflow ID %s, want the run itself", a.ID, got.ID, got.WorkflowID)
	}
	wantIDs(t, "list by workflow ID", e.listIDs(store.RunListParams{WorkflowID: a.ID}), []string{a.ID})
	res, err := e.st.RunCreate(e.ctx, e.params(withWorkflowID(a.ID), withReuse(store.ReuseReturnExisting)))
	if err != nil || res.Created || res.Run == nil || res.Run.ID != a.ID {
		t.Fatalf("ReuseReturnExisting on %s = %+v, %v; want that run, not created", a.ID, res, err)
	}
	_, err = e.st.RunCreate(e.ctx, e.params(withWorkflowID(a.ID), withReuse(store.ReuseReject)))
	wantErr(t, "ReuseReject on a run's ID", err, store.ErrRunExists)
	wantIDs(t, "list by workflow ID after the rejected starts", e.listIDs(store.RunListParams{WorkflowID: a.ID}), []string{a.ID})
}

// wfidExplicitOnActiveImplicit: a start with workflow ID W is refused while a run
// started without one, whose ID is W, is active, and allowed once it ended; the
// lookups by W then see both, newest first, and a ref W still names the run
// whose ID it is.
func wfidExplicitOnActiveImplicit(t *testing.T, e *env) {
	a := e.create(implicit())
	_, err := e.st.RunCreate(e.ctx, e.params(withWorkflowID(a.ID)))
	wantErr(t, "start with a pending run's ID as workflow ID", err, store.ErrRunExists)
	cr := e.claimOne(a.ID)
	_, err = e.st.RunCreate(e.ctx, e.params(withWorkflowID(a.ID)))
	wantErr(t, "start with a running run's ID as workflow ID", err, store.ErrRunExists)
	e.finish(cr)

	b := e.create(withWorkflowID(a.ID))
	_, err = e.st.RunCreate(e.ctx, e.params(withWorkflowID(a.ID)))
	wantErr(t, "second start while the first is pending", err, store.ErrRunExists)
	wantIDs(t, "list by workflow ID", e.listIDs(store.RunListParams{WorkflowID: a.ID}), []string{b.ID, a.ID})
	if got := e.get(a.ID); got.ID != a.ID {
		t.Fatalf("RunGet(%s) = %s, want the run with that ID", a.ID, got.ID)
	}
	res, err := e.st.RunCreate(e.ctx, e.params(withWorkflowID(a.ID), withReuse(store.ReuseReturnExisting)))
	if err != nil || res.Created || res.Run == nil || res.Run.ID != b.ID {
		t.Fatalf("ReuseReturnExisting on %s = %+v, %v; want the latest run, %s", a.ID, res, err, b.ID)
	}
}

// wfidBatchExplicitOnActiveImplicit: the same rule for a batch item.
func wfidBatchExplicitOnActiveImplicit(t *testing.T, e *env) {
	a := e.create(implicit())
	res := e.batch(e.params(withWorkflowID(a.ID)), e.params(implicit()))
	wantErr(t, "batch item with an active run's ID as workflow ID", res.Items[0].Err, store.ErrRunExists)
	if res.Items[1].Err != nil || !res.Items[1].Created {
		t.Fatalf("batch item 1 = %+v, want created", res.Items[1])
	}
	wantIDs(t, "list by workflow ID", e.listIDs(store.RunListParams{WorkflowID: a.ID}), []string{a.ID})
}

// wfidChildExplicitOnActiveImplicit: the same rule for a child run, which fails
// the checkpoint that creates it, and the checkpoint writes nothing.
func wfidChildExplicitOnActiveImplicit(t *testing.T, e *env) {
	parent := e.start()
	a := e.create(implicit())
	g := e.group(1, 2, "c")
	g.Runs[1].WorkflowID = a.ID
	err := e.checkpointErr(parent, store.CheckpointParams{Status: store.StatusRunning, Children: []*store.ChildGroup{g},
		Ops: []*store.Op{{Position: 1, Kind: store.OpChild, Name: "map", StartedAt: e.clk.Now()}}})
	wantErr(t, "child with an active run's ID as workflow ID", err, store.ErrRunExists)
	if kids := e.children(parent.Run.ID, 1); len(kids) != 0 {
		t.Fatalf("children after the failed checkpoint = %v, want none", runIDs(kids))
	}
}
