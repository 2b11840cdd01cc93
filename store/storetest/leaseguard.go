package storetest

import (
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Guarded lease writes (store.CheckpointParams.Seq): a worker retries a
// checkpoint or a release whose answer it lost, and the store applies it once.
var leaseGuardCases = []testCase{
	{"CheckpointRetried", guardCheckpointRetried},
	{"FinalCheckpointRetried", guardFinalRetried},
	{"FingerprintConflict", guardFingerprintConflict},
	{"WaitingCheckpointRetried", guardWaitingRetried},
	{"NoEventsCheckpointRetried", guardNoEventsRetried},
	{"ChildFinalRetried", guardChildFinalRetried},
	{"RetryAfterAnotherLease", guardAfterAnotherLease},
	{"ReleaseRetried", guardReleaseRetried},
	{"BadSeq", guardBadSeq},
}

// guarded checkpoints p as the seq-th write of cr's lease, with fingerprint fp.
func (e *env) guarded(cr *store.ClaimedRun, seq, fp int64, p store.CheckpointParams) (*store.CheckpointResult, error) {
	p.Lease, p.Seq, p.Fingerprint = cr.Lease(), seq, fp
	return e.st.Checkpoint(e.ctx, &p)
}

func (e *env) wantApplied(what string, res *store.CheckpointResult, err error, replayed bool) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
	if res.Replayed != replayed {
		e.t.Fatalf("%s: Replayed = %v, want %v", what, res.Replayed, replayed)
	}
}

func guardCheckpointRetried(t *testing.T, e *env) {
	cr := e.start()
	first := store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(0, "a", `1`)},
		KV: []store.KVWrite{{Key: "k", Value: []byte(`1`)}}, Stream: []store.StreamWrite{sw("step", `"a"`)}}
	res, err := e.guarded(cr, 1, 0, first)
	e.wantApplied("first checkpoint", res, err, false)
	e.clk.Advance(time.Second)
	res, err = e.guarded(cr, 1, 0, first)
	e.wantApplied("retry of the first checkpoint", res, err, true)
	wantStream(t, e.streamRead(cr.Run.ID, 0, 10), 1, `step="a"`)

	second := store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(1, "b", `2`)},
		Stream: []store.StreamWrite{sw("step", `"b"`)}}
	res, err = e.guarded(cr, 2, 0, second)
	e.wantApplied("second checkpoint", res, err, false)
	res, err = e.guarded(cr, 1, 0, first) // a late duplicate of the first
	e.wantApplied("late retry of the first checkpoint", res, err, true)
	res, err = e.guarded(cr, 2, 0, second)
	e.wantApplied("retry of the second checkpoint", res, err, true)
	wantStream(t, e.streamRead(cr.Run.ID, 0, 10), 1, `step="a"`, `step="b"`)
	if ops := e.history(cr.Run.ID); len(ops) != 2 {
		t.Fatalf("history has %d ops, want 2", len(ops))
	}
	// An unguarded checkpoint of the lease still applies.
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Stream: []store.StreamWrite{sw("x", `0`)}})
	wantStream(t, e.streamRead(cr.Run.ID, 2, 10), 3, `x=0`)
}

func guardFinalRetried(t *testing.T, e *env) {
	cr := e.start()
	res, err := e.guarded(cr, 1, 0, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(0, "a", `1`)}})
	e.wantApplied("checkpoint", res, err, false)
	final := store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`"done"`),
		Stream: []store.StreamWrite{sw("run.succeeded", `"done"`)}}
	res, err = e.guarded(cr, 2, 0, final)
	e.wantApplied("final checkpoint", res, err, false)
	finishedAt := e.get(cr.Run.ID).FinishedAt
	e.clk.Advance(time.Second)
	res, err = e.guarded(cr, 2, 0, final)
	e.wantApplied("retry of the final checkpoint", res, err, true)
	r := e.wantStatus(cr.Run.ID, store.StatusSucceeded)
	wantTimePtr(t, "FinishedAt after the retry", r.FinishedAt, *finishedAt)
	wantTime(t, "At of the retry", res.At, r.UpdatedAt)
	wantStream(t, e.streamRead(cr.Run.ID, 0, 10), 1, `run.succeeded="done"`)
	// A write the lease never made is refused: the lease ended.
	_, err = e.guarded(cr, 3, 0, store.CheckpointParams{Status: store.StatusRunning})
	wantErr(t, "a new checkpoint after the final one", err, store.ErrLeaseLost)
}

func guardFingerprintConflict(t *testing.T, e *env) {
	cr := e.start()
	final := store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`"done"`)}
	res, err := e.guarded(cr, 1, 42, final)
	e.wantApplied("final checkpoint", res, err, false)
	res, err = e.guarded(cr, 1, 42, final)
	e.wantApplied("retry with the same fingerprint", res, err, true)
	other := store.CheckpointParams{Status: store.StatusFailed, Error: &store.ErrorInfo{Message: "no"}}
	_, err = e.guarded(cr, 1, 43, other)
	wantErr(t, "the same key with another request", err, store.ErrIdempotencyKeyConflict)
	r := e.wantStatus(cr.Run.ID, store.StatusSucceeded)
	if string(r.Output) != `"done"` {
		t.Fatalf("output = %s, want the first request's", r.Output)
	}
	// A retry without a fingerprint is not compared.
	res, err = e.guarded(cr, 1, 0, final)
	e.wantApplied("retry without a fingerprint", res, err, true)
}

func guardWaitingRetried(t *testing.T, e *env) {
	cr := e.start()
	wait := store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event", WaitEvents: []string{"go"},
		Ops: []*store.Op{{Position: 0, Kind: store.OpEvent, Name: "go", StartedAt: e.clk.Now()}}}
	res, err := e.guarded(cr, 1, 0, wait)
	e.wantApplied("waiting checkpoint", res, err, false)
	res, err = e.guarded(cr, 1, 0, wait)
	e.wantApplied("retry of the waiting checkpoint", res, err, true)
	e.wantStatus(cr.Run.ID, store.StatusWaiting)
	e.send(cr.Run.ID, "go", `1`)
	res, err = e.guarded(cr, 1, 0, wait)
	e.wantApplied("retry after the event woke the run", res, err, true)
	e.wantStatus(cr.Run.ID, store.StatusPending)
}

func guardNoEventsRetried(t *testing.T, e *env) {
	cr := e.start()
	timedOut := store.CheckpointParams{Status: store.StatusRunning, NoEvents: []string{"go"},
		Ops: []*store.Op{{Position: 0, Kind: store.OpEvent, Name: "go", Done: true, StartedAt: e.clk.Now(),
			Error: &store.ErrorInfo{Message: "timed out", Type: "timeout"}}}}
	res, err := e.guarded(cr, 1, 0, timedOut)
	e.wantApplied("timed-out wait", res, err, false)
	e.send(cr.Run.ID, "go", `1`)
	res, err = e.guarded(cr, 1, 0, timedOut)
	e.wantApplied("retry after the event came", res, err, true)
	_, err = e.guarded(cr, 2, 0, timedOut)
	wantErr(t, "a new guarded write with the event in the inbox", err, store.ErrConflict)
}

func guardChildFinalRetried(t *testing.T, e *env) {
	parent := e.start()
	e.createGroup(parent, e.group(0, 1, "c"))
	kids := e.claimChildren()
	if len(kids) != 1 {
		t.Fatalf("claimed %d children, want 1", len(kids))
	}
	final := store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`"ok"`)}
	res, err := e.guarded(kids[0], 1, 7, final)
	e.wantApplied("child's final checkpoint", res, err, false)
	res, err = e.guarded(kids[0], 1, 7, final)
	e.wantApplied("retry of the child's final checkpoint", res, err, true)
	e.wantStatus(kids[0].Run.ID, store.StatusSucceeded)
	ops := e.history(parent.Run.ID)
	if len(ops) != 1 {
		t.Fatalf("parent history has %d ops, want 1", len(ops))
	}
}

func guardAfterAnotherLease(t *testing.T, e *env) {
	stale := e.start()
	res, err := e.guarded(stale, 1, 0, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(0, "a", `1`)}})
	e.wantApplied("checkpoint", res, err, false)
	e.clk.Advance(leaseDur)
	fresh := e.claimOne(stale.Run.ID, claimBy("worker-2"))
	_, err = e.guarded(stale, 1, 0, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(0, "a", `1`)}})
	wantErr(t, "retry under a lease taken over", err, store.ErrLeaseLost)
	// The new lease numbers its writes from 1 again.
	res, err = e.guarded(fresh, 1, 0, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(1, "b", `2`)}})
	e.wantApplied("the new lease's first checkpoint", res, err, false)
	if ops := e.history(stale.Run.ID); len(ops) != 2 {
		t.Fatalf("history has %d ops, want 2", len(ops))
	}
}

func guardReleaseRetried(t *testing.T, e *env) {
	cr := e.start()
	res, err := e.guarded(cr, 1, 0, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(0, "a", `1`)}})
	e.wantApplied("checkpoint", res, err, false)
	release := &store.LeaseReleaseParams{Lease: cr.Lease(), Seq: 2, Fingerprint: 5}
	if err := e.st.LeaseRelease(e.ctx, release); err != nil {
		t.Fatalf("LeaseRelease: %v", err)
	}
	if err := e.st.LeaseRelease(e.ctx, release); err != nil {
		t.Fatalf("retry of LeaseRelease: %v", err)
	}
	e.wantStatus(cr.Run.ID, store.StatusPending)
	// (A release has no content but its lease and key, so a retry is always
	// the same request: over the worker protocol the server fingerprints it.)
	e.claimOne(cr.Run.ID, claimBy("worker-2"))
	wantErr(t, "retry of LeaseRelease after another claim", e.st.LeaseRelease(e.ctx, release), store.ErrLeaseLost)
	if r := e.wantStatus(cr.Run.ID, store.StatusRunning); r.LeaseOwner != "worker-2" {
		t.Fatalf("lease owner = %q, want worker-2", r.LeaseOwner)
	}
}

func guardBadSeq(t *testing.T, e *env) {
	cr := e.start()
	_, err := e.guarded(cr, -1, 0, store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`1`)})
	wantErr(t, "Checkpoint with Seq -1", err, store.ErrInvalidParams)
	err = e.st.LeaseRelease(e.ctx, &store.LeaseReleaseParams{Lease: cr.Lease(), Seq: -1})
	wantErr(t, "LeaseRelease with Seq -1", err, store.ErrInvalidParams)
	e.wantStatus(cr.Run.ID, store.StatusRunning)
}
