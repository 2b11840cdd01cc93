package storetest

import (
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var cancelCases = []testCase{
	{"Finished", cancelFinished},
	{"PendingNeverClaimed", cancelPending},
	{"Running", cancelRunning},
	{"Waiting", cancelWaiting},
	{"Blocked", cancelBlocked},
}

func (e *env) cancel(ref string) *store.Run {
	e.t.Helper()
	r, err := e.st.RunCancel(e.ctx, &store.RunCancelParams{Namespace: ns, Ref: ref})
	if err != nil {
		e.t.Fatalf("RunCancel(%s): %v", ref, err)
	}
	return r
}

func cancelFinished(t *testing.T, e *env) {
	done := e.start()
	e.finish(done)
	cancelled := e.create()
	e.cancel(cancelled.ID)
	for _, id := range []string{done.Run.ID, cancelled.ID} {
		_, err := e.st.RunCancel(e.ctx, &store.RunCancelParams{Namespace: ns, Ref: id})
		wantErr(t, "RunCancel of a finished run", err, store.ErrRunFinished)
	}
	if r := e.wantStatus(done.Run.ID, store.StatusSucceeded); r.CancelRequested {
		t.Fatal("RunCancel of a succeeded run flagged it")
	}
}

// wantCancelledNow checks that r ended cancelled at once.
func (e *env) wantCancelledNow(r *store.Run) {
	e.t.Helper()
	for _, got := range []*store.Run{r, e.get(r.ID)} {
		if got.Status != store.StatusCancelled || got.Error == nil || got.Error.Type != "cancelled" {
			e.t.Fatalf("run = %+v (error %+v), want cancelled with error type cancelled", got, got.Error)
		}
		wantTimePtr(e.t, "FinishedAt", got.FinishedAt, e.clk.Now())
	}
	e.wantNoClaim()
}

func cancelPending(t *testing.T, e *env) {
	r := e.create()
	e.clk.Advance(time.Second)
	e.wantCancelledNow(e.cancel(r.ID))
}

func cancelRunning(t *testing.T, e *env) {
	cr := e.start()
	r := e.cancel(cr.Run.ID)
	for _, got := range []*store.Run{r, e.get(cr.Run.ID)} {
		if got.Status != store.StatusRunning || !got.CancelRequested || got.FinishedAt != nil {
			t.Fatalf("cancelled running run = %+v, want still running with CancelRequested", got)
		}
	}
	res := e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(0, "s", `1`)}})
	if !res.CancelRequested {
		t.Fatal("Checkpoint after RunCancel: CancelRequested = false")
	}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusCancelled,
		Error: &store.ErrorInfo{Message: "cancelled", Type: "cancelled"}})
	e.wantStatus(cr.Run.ID, store.StatusCancelled)
}

func cancelWaiting(t *testing.T, e *env) {
	cr := e.start()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event",
		Ops: []*store.Op{e.doneStep(0, "s", `1`)}})
	r := e.cancel(cr.Run.ID)
	for _, got := range []*store.Run{r, e.get(cr.Run.ID)} {
		if got.Status != store.StatusPending || !got.CancelRequested {
			t.Fatalf("cancelled waiting run = %+v, want pending with CancelRequested", got)
		}
	}
	again := e.claimOne(cr.Run.ID)
	if !again.Run.CancelRequested || len(again.History) != 1 {
		t.Fatalf("claimed after cancel: %+v, history %v; want CancelRequested and its history", again.Run, opPositions(again.History))
	}
}

func cancelBlocked(t *testing.T, e *env) {
	cr := e.start()
	e.block(cr)
	e.clk.Advance(time.Second)
	e.wantCancelledNow(e.cancel(cr.Run.ID))
}
