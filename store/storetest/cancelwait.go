package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// A cancellation that lands while a run is running must not be lost when the run
// then starts to wait, blocks or starts children: the checkpoint that ends the
// lease hands the run back (pending, due now, TopicReady) so a worker claims it and
// sees CancelRequested, or, for a blocked run, ends it cancelled at once.
var cancelWaitCases = []testCase{
	{"ThenSleep", cancelThenSleep},
	{"ThenWaitEvent", cancelThenWaitEvent},
	{"ThenBlock", cancelThenBlock},
	{"ThenChildren", cancelThenChildren},
	{"RacesCheckpoints", cancelRacesCheckpoints},
}

// wantHandedBack checks that cr's run, cancelled and then checkpointed into a
// wait, is pending and due now with CancelRequested, and claims it again.
func (e *env) wantHandedBack(cr *store.ClaimedRun, res *store.CheckpointResult) *store.ClaimedRun {
	e.t.Helper()
	if !res.CancelRequested {
		e.t.Fatal("Checkpoint after RunCancel: CancelRequested = false")
	}
	e.serveAll() // else the pending run's reason says that no worker serves it
	r := e.get(cr.Run.ID)
	if r.Status != store.StatusPending || !r.CancelRequested || r.WaitReason != "" {
		e.t.Fatalf("run cancelled before it waited = %+v, want pending with CancelRequested", r)
	}
	wantTime(e.t, "AvailableAt", r.AvailableAt, e.clk.Now())
	again := e.claimOne(cr.Run.ID)
	if !again.Run.CancelRequested {
		e.t.Fatalf("claimed after cancel: %+v, want CancelRequested", again.Run)
	}
	return again
}

func cancelThenSleep(t *testing.T, e *env) {
	cr := e.start()
	e.cancel(cr.Run.ID)
	ready := e.subscribe(store.TopicReady)
	wake := e.clk.Now().Add(time.Hour)
	res := e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "sleep",
		WakeAt: &wake, Ops: []*store.Op{e.doneStep(0, "s", `1`)}})
	wantSignal(t, "TopicReady after a cancelled run's wait", ready)
	again := e.wantHandedBack(cr, res)
	if len(again.History) != 1 {
		t.Fatalf("history = %v, want the checkpoint's op", opPositions(again.History))
	}
}

func cancelThenWaitEvent(t *testing.T, e *env) {
	cr := e.start()
	e.cancel(cr.Run.ID)
	res := e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event go",
		WaitEvents: []string{"go"}})
	e.wantHandedBack(cr, res)
}

func cancelThenBlock(t *testing.T, e *env) {
	cr := e.start()
	e.cancel(cr.Run.ID)
	e.clk.Advance(time.Second)
	e.block(cr)
	e.wantCancelledNow(e.get(cr.Run.ID))
}

func cancelThenChildren(t *testing.T, e *env) {
	parent := e.start()
	e.cancel(parent.Run.ID)
	g := e.group(1, 2, "c")
	res := e.checkpoint(parent, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "children",
		Children: []*store.ChildGroup{g},
		Ops:      []*store.Op{{Position: 1, Kind: store.OpChild, Name: "map", StartedAt: e.clk.Now()}}})
	e.wantHandedBack(parent, res)
	for _, k := range e.children(parent.Run.ID, 1) {
		if k.Status != store.StatusCancelled {
			t.Fatalf("child %s of a cancelled parent = %s, want cancelled", k.ID, k.Status)
		}
	}
}

// cancelRacesCheckpoints cancels runs while their workers checkpoint them into a
// long wait, concurrently (a driver may batch both into one transaction): whatever
// the order, every run ends up pending with CancelRequested.
func cancelRacesCheckpoints(t *testing.T, e *env) {
	const n = 20
	var crs []*store.ClaimedRun
	for range n {
		e.create()
	}
	crs = e.claim().Runs
	if len(crs) != n {
		t.Fatalf("claimed %d runs, want %d", len(crs), n)
	}
	wake := e.clk.Now().Add(time.Hour)
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for _, cr := range crs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := e.st.RunCancel(e.ctx, &store.RunCancelParams{Namespace: ns, Ref: cr.Run.ID})
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := e.st.Checkpoint(e.ctx, &store.CheckpointParams{Lease: cr.Lease(),
				Status: store.StatusWaiting, WakeAt: &wake, WaitReason: "sleep"})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("RunCancel or Checkpoint: %v", err)
		}
	}
	for _, cr := range crs {
		r := e.get(cr.Run.ID)
		if r.Status != store.StatusPending || !r.CancelRequested {
			t.Fatalf("run %s = %s (cancel requested %v), want pending with CancelRequested",
				r.ID, r.Status, r.CancelRequested)
		}
	}
	if got := len(e.claim().Runs); got != n {
		t.Fatalf("claimed %d cancelled runs, want %d", got, n)
	}
}
