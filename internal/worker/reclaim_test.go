package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// execution is one Execute call of the overlapping executor.
type execution struct {
	token   int64
	ctx     context.Context
	release chan struct{}
}

// overlapping announces each execution and holds it until the test releases
// it (or its context ends), so that two executions of one run can overlap.
type overlapping struct{ started chan execution }

func (o overlapping) Execute(ctx context.Context, cr *store.ClaimedRun, _ *Control) {
	e := execution{token: cr.LeaseToken, ctx: ctx, release: make(chan struct{})}
	o.started <- e
	select {
	case <-e.release:
	case <-ctx.Done():
	}
}

// extendAfter is a store whose LeasesExtend waits for before() first: the
// worker has taken its snapshot of the leases it holds by then.
type extendAfter struct {
	store.Store
	mu     sync.Mutex
	before func() // called once, by the next LeasesExtend
}

func (s *extendAfter) LeasesExtend(ctx context.Context, p *store.LeasesExtendParams) (*store.LeasesExtendResult, error) {
	s.mu.Lock()
	before := s.before
	s.before = nil
	s.mu.Unlock()
	if before != nil {
		before()
	}
	return s.Store.LeasesExtend(ctx, p)
}

// A run handed back while its execution here has not yet returned can be
// claimed again by the same worker, so two executions of it overlap for a
// moment. A heartbeat that sent the first execution's lease, now stale, must not
// stop the second (its lease is fresh), and the first execution's end must not
// free the second one's slot (the heartbeat would stop extending its lease).
// Both happened: a cancelled waiting run was handed back, claimed again, and
// then abandoned until its new lease expired.
func TestOverlappingExecutionsOfARun(t *testing.T) {
	t.Parallel()
	f := setup(t)
	st := &extendAfter{Store: f.st}
	ex := overlapping{started: make(chan execution, 4)}
	w, err := New(Config{Store: st, Namespace: "ns", Queues: []string{"q"}, Workflows: func() []string { return []string{"a"} },
		Name: "w-1", Concurrency: 2, LeaseDuration: 2 * time.Hour, HeartbeatInterval: time.Hour,
		PollInterval: time.Hour, ShutdownGrace: time.Millisecond}, ex)
	if err != nil {
		t.Fatal(err)
	}
	f.createRun("r-1", "a")
	w.Start()
	defer stop(t, w)
	next := func() execution {
		t.Helper()
		select {
		case e := <-ex.started:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no execution started")
			return execution{}
		}
	}
	first := next()

	// The heartbeat snapshots the first execution's lease; before it reaches
	// the store, the run is handed back and claimed again.
	var second execution
	st.mu.Lock()
	st.before = func() {
		if err := f.st.LeaseRelease(t.Context(), &store.LeaseReleaseParams{Lease: store.Lease{Namespace: "ns", RunID: "r-1", Token: first.token}}); err != nil {
			t.Error(err)
		}
		second = next()
	}
	st.mu.Unlock()
	w.extendLeases(t.Context())
	if second.token == 0 || second.token == first.token {
		t.Fatalf("second execution's token %d (first %d)", second.token, first.token)
	}
	if err := context.Cause(second.ctx); err != nil {
		t.Fatalf("the second execution was stopped: %v", err)
	}

	// The first execution returns; the second keeps its slot and its lease.
	close(first.release)
	running := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.running
	}
	deadline := time.Now().Add(5 * time.Second)
	for running() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("executions running: %d, want 1", running())
		}
		time.Sleep(time.Millisecond)
	}
	if n := w.Active(); n != 1 {
		t.Fatalf("active: %d, want 1 (the second execution)", n)
	}
	w.extendLeases(t.Context())
	if err := context.Cause(second.ctx); errors.Is(err, store.ErrLeaseLost) {
		t.Fatal("the second execution lost its lease")
	}
	run, err := f.st.RunGet(t.Context(), &store.RunGetParams{Namespace: "ns", Ref: "r-1"})
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != store.StatusRunning || run.LeaseOwner != "w-1" {
		t.Fatalf("run %s owned by %q, want running by w-1", run.Status, run.LeaseOwner)
	}
	close(second.release)
}
