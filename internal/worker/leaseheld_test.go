package worker

import (
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
)

// A claim read after its lease expired is checked with the store before its
// run starts: dropped when another worker has claimed the run since (the
// executor never sees it, and the run stays the other worker's), run when
// the store still holds the lease (only the worker's clock was ahead), the
// lease then extended.
func TestExpiredClaimCheckedBeforeStart(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	claim := func(worker string) *store.ClaimedRun {
		res, err := f.st.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Queues: []string{"q"},
			Workflows: []string{"wf"}, Worker: worker, Max: 1, LeaseDuration: time.Second})
		if err != nil || len(res.Runs) != 1 {
			t.Fatalf("claim for %s: %v, %v", worker, res, err)
		}
		return res.Runs[0]
	}
	newWorker := func(clk clock.Clock) *Worker {
		w, err := New(Config{Store: f.st, Namespace: "ns", Queues: []string{"q"}, Workflows: f.workflows,
			Name: "w-1", LeaseDuration: time.Minute, ShutdownGrace: time.Millisecond, Clock: clk}, f.exec)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}

	f.createRun("taken", "wf")
	stale := claim("w-1")
	f.clk.Advance(2 * time.Second) // the lease lapses; another worker claims the run
	claim("other")
	w := newWorker(clock.NewFake(f.clk.Now()))
	w.launch(stale)
	if err := w.waitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-f.exec.started:
		t.Fatalf("run %s, claimed by another worker since, was executed", id)
	default:
	}
	r, err := f.st.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: "taken"})
	if err != nil || r.LeaseOwner != "other" || r.Attempts != 2 {
		t.Fatalf("run after the drop: %+v, %v; want held by other, claimed twice", r, err)
	}

	f.createRun("held", "wf")
	cr := claim("w-1")
	ahead := clock.NewFake(f.clk.Now().Add(time.Hour)) // the worker's clock runs an hour ahead
	w2 := newWorker(ahead)
	w2.launch(cr)
	f.waitStarted("held")
	r, err = f.st.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: "held"})
	if err != nil || r.LeaseExpiresAt == nil || r.LeaseExpiresAt.Sub(f.clk.Now()) < 30*time.Second {
		t.Fatalf("run after its start: %+v, %v; want its lease extended by the worker's lease", r, err)
	}
	w2.hardStop(ErrShutdown)
	if err := w2.waitIdle(ctx); err != nil {
		t.Fatal(err)
	}
}
