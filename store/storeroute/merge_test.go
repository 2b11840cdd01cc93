package storeroute_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"github.com/trellis-dev/trellis/store/storetest"
)

func (f *fixture) claim(t *testing.T, ns string) *store.ClaimedRun {
	t.Helper()
	res, err := f.r.RunsClaim(f.ctx, &store.RunsClaimParams{Namespace: ns, Workflows: []string{"wf"}, Worker: "w",
		Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != 1 {
		t.Fatalf("RunsClaim(%s) = %+v, %v; want one run", ns, res, err)
	}
	return res.Runs[0]
}

// TestLeasesExtendSplitsByStore: one heartbeat over leases of two stores
// extends each in its store, with its own step, and merges what is lost and
// what is cancelled.
func TestLeasesExtendSplitsByStore(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.create(t, f.r, "orders", "o1", nil)
	f.create(t, f.r, "default", "d1", nil)
	f.create(t, f.r, "default", "d2", nil)
	o1, d1, d2 := f.claim(t, "orders"), f.claim(t, "default"), f.claim(t, "default")
	if _, err := f.r.RunCancel(f.ctx, &store.RunCancelParams{Namespace: "orders", Ref: "o1"}); err != nil {
		t.Fatal(err)
	}
	stale := d2.Lease()
	stale.Token++
	steps := []store.RunStep{{Name: "charge", Attempt: 1, Position: 0}, {Name: "ship", Attempt: 2, Position: 1}, {}}
	res, err := f.r.LeasesExtend(f.ctx, &store.LeasesExtendParams{Leases: []store.Lease{o1.Lease(), d1.Lease(), stale},
		Duration: time.Hour, Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Lost, []string{"d2"}) || !slices.Equal(res.CancelRequested, []string{"o1"}) {
		t.Errorf("LeasesExtend = lost %v, cancelled %v; want [d2] and [o1]", res.Lost, res.CancelRequested)
	}
	for _, c := range []struct {
		st     store.Store
		ns, id string
		step   string
	}{{f.orders, "orders", "o1", "charge"}, {f.control, "default", "d1", "ship"}} {
		run, err := c.st.RunGet(f.ctx, &store.RunGetParams{Namespace: c.ns, Ref: c.id})
		if err != nil {
			t.Fatal(err)
		}
		if run.CurrentStep == nil || run.CurrentStep.Name != c.step {
			t.Errorf("%s: CurrentStep = %+v, want %q", c.id, run.CurrentStep, c.step)
		}
		if run.LeaseExpiresAt == nil || !run.LeaseExpiresAt.Equal(t0.Add(time.Hour)) {
			t.Errorf("%s: lease expires at %v, want %v", c.id, run.LeaseExpiresAt, t0.Add(time.Hour))
		}
	}
	// Bad parameters change nothing, in either store.
	_, err = f.r.LeasesExtend(f.ctx, &store.LeasesExtendParams{Leases: []store.Lease{o1.Lease(), d1.Lease()},
		Duration: 2 * time.Hour, Steps: steps})
	if !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("LeasesExtend with 3 steps for 2 leases: %v, want ErrInvalidParams", err)
	}
	run, _ := f.orders.RunGet(f.ctx, &store.RunGetParams{Namespace: "orders", Ref: "o1"})
	if !run.LeaseExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("o1's lease after a refused heartbeat expires at %v, want %v", run.LeaseExpiresAt, t0.Add(time.Hour))
	}
}

// signalled waits for a signal on ch.
func signalled(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("no signal after %s", what)
	}
}

// TestSubscribeMergesEveryStore: TopicReady hears every store; a run's topic
// is its namespace's store's; the forwarding goroutines end with the
// subscription and with its context. Not parallel: it checks for leaked
// goroutines.
func TestSubscribeMergesEveryStore(t *testing.T) {
	f := setup(t)
	// The stores' own goroutines are running by now; any other left at the
	// end is the router's.
	ignore := goleak.IgnoreCurrent()
	ready, stop, err := f.r.Subscribe(f.ctx, store.TopicReady)
	if err != nil {
		t.Fatal(err)
	}
	f.create(t, f.r, "orders", "o1", nil)
	signalled(t, ready, "a run created in the orders store")
	f.create(t, f.r, "default", "d1", nil)
	signalled(t, ready, "a run created in the control store")

	changed, stopRun, err := f.r.Subscribe(f.ctx, store.RunTopic("orders", "o1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.RunCancel(f.ctx, &store.RunCancelParams{Namespace: "orders", Ref: "o1"}); err != nil {
		t.Fatal(err)
	}
	signalled(t, changed, "o1 was cancelled")
	stopRun()
	stop()
	stop() // idempotent

	// A subscription whose context ends stops its goroutines without stop.
	ctx, cancel := context.WithCancel(f.ctx)
	cancels, stopCancels, err := f.r.Subscribe(ctx, store.TopicCancel)
	if err != nil {
		t.Fatal(err)
	}
	f.create(t, f.r, "orders", "o2", nil)
	f.claim(t, "orders")
	if _, err := f.r.RunCancel(f.ctx, &store.RunCancelParams{Namespace: "orders", Ref: "o2"}); err != nil {
		t.Fatal(err)
	}
	signalled(t, cancels, "a running run of the orders store was cancelled")
	cancel()
	stopCancels()
	if _, _, err := f.r.Subscribe(ctx, store.TopicReady); !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe on an ended context: %v, want context.Canceled", err)
	}
	goleak.VerifyNone(t, ignore)
}

// TestSchedulerLeaseSpansStores: the lease is held in every store or not at
// all, a routed namespace's fire is fenced by its store's own epoch, and a
// contender that holds one store's lease keeps the router's from being held.
func TestSchedulerLeaseSpansStores(t *testing.T) {
	t.Parallel()
	f := setup(t)
	spec := store.ScheduleSpec{Workflow: "wf", Queue: "default", Cron: "* * * * *", TimeZone: "UTC",
		Overlap: store.OverlapAllowAll, CatchupWindow: time.Minute}
	for _, ns := range []string{"orders", "default"} {
		if _, err := f.r.ScheduleCreate(f.ctx, &store.ScheduleCreateParams{Namespace: ns, Name: "s", Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	// Another scheduler took the orders store's lease directly first.
	x, err := f.orders.SchedulerLeaseAcquire(f.ctx, &store.SchedulerLeaseParams{Owner: "x", Duration: 10 * time.Second})
	if err != nil || !x.Held {
		t.Fatalf("x on the orders store: %+v, %v", x, err)
	}
	a, err := f.r.SchedulerLeaseAcquire(f.ctx, &store.SchedulerLeaseParams{Owner: "a", Duration: 10 * time.Second})
	if err != nil || a.Held || a.Owner != "x" {
		t.Fatalf("a while x holds the orders store: %+v, %v; want not held, owner x", a, err)
	}
	// a gave back the control store's lease it took: b gets it at once.
	b, err := f.control.SchedulerLeaseAcquire(f.ctx, &store.SchedulerLeaseParams{Owner: "b", Duration: time.Second})
	if err != nil || !b.Held {
		t.Fatalf("b on the control store after a gave up: %+v, %v; want held", b, err)
	}
	f.clk.Advance(11 * time.Second) // x's and b's leases expire
	a, err = f.r.SchedulerLeaseAcquire(f.ctx, &store.SchedulerLeaseParams{Owner: "a", Duration: 10 * time.Second})
	if err != nil || !a.Held {
		t.Fatalf("a after x expired: %+v, %v; want held", a, err)
	}
	fire := func(ns string, epoch int64) error {
		at := f.clk.Now()
		_, err := f.r.ScheduleFire(f.ctx, &store.ScheduleFireParams{Namespace: ns, Name: "s", Epoch: epoch, Cursor: &at,
			Run: &store.RunCreateParams{Namespace: ns, ID: ns + "-" + at.Format("150405.000000000"), WorkflowID: ns + "-s",
				Workflow: "wf", Queue: "default"}})
		return err
	}
	for _, ns := range []string{"orders", "default"} {
		if err := fire(ns, a.Epoch); err != nil {
			t.Errorf("fire in %s with a's epoch %d: %v", ns, a.Epoch, err)
		}
		if err := fire(ns, a.Epoch+7); !errors.Is(err, store.ErrNotLeader) {
			t.Errorf("fire in %s with another epoch: %v, want ErrNotLeader", ns, err)
		}
	}
	// c contends: refused at the control store, it takes nothing.
	c, err := f.r.SchedulerLeaseAcquire(f.ctx, &store.SchedulerLeaseParams{Owner: "c", Duration: 10 * time.Second})
	if err != nil || c.Held {
		t.Fatalf("c while a leads: %+v, %v; want not held", c, err)
	}
	renewed, err := f.r.SchedulerLeaseAcquire(f.ctx, &store.SchedulerLeaseParams{Owner: "a", Epoch: a.Epoch, Duration: 10 * time.Second})
	if err != nil || !renewed.Held || renewed.Epoch != a.Epoch {
		t.Fatalf("a renews: %+v, %v; want held at epoch %d", renewed, err, a.Epoch)
	}
	if err := f.r.SchedulerLeaseRelease(f.ctx, &store.SchedulerLeaseParams{Owner: "a", Epoch: a.Epoch}); err != nil {
		t.Fatal(err)
	}
	if err := fire("orders", a.Epoch); !errors.Is(err, store.ErrNotLeader) {
		t.Errorf("fire in orders after a released: %v, want ErrNotLeader", err)
	}
	c, err = f.r.SchedulerLeaseAcquire(f.ctx, &store.SchedulerLeaseParams{Owner: "c", Duration: 10 * time.Second})
	if err != nil || !c.Held {
		t.Fatalf("c after a released: %+v, %v; want held", c, err)
	}
	if err := fire("orders", c.Epoch); err != nil {
		t.Errorf("fire in orders with c's epoch: %v", err)
	}
}

// TestIdempotencyPurgeSharesItsLimit: one call deletes at most Limit keys
// over all stores, and fewer only when none is left.
func TestIdempotencyPurgeSharesItsLimit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i, ns := range []string{"orders", "orders", "default", "default", "default"} {
		id := string(rune('a' + i))
		f.create(t, f.r, ns, id, &store.IdempotencyRecord{Key: "k" + id, Fingerprint: []byte("fp")})
	}
	f.clk.Advance(store.IdempotencyTTL + time.Minute)
	for _, want := range []int{3, 2, 0} {
		n, err := f.r.IdempotencyPurge(f.ctx, &store.IdempotencyPurgeParams{Limit: 3})
		if err != nil || n != want {
			t.Fatalf("IdempotencyPurge(3) = %d, %v; want %d", n, err, want)
		}
	}
}

// TestCapabilities: the router offers the optional interfaces its stores all
// offer, and never a transaction of one database.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for name, ok := range map[string]bool{
		"RunCounter":     is[store.RunCounter](f.r),
		"QueueCounter":   is[store.QueueCounter](f.r),
		"WorkerCounter":  is[store.WorkerCounter](f.r),
		"RunWatcher":     is[store.RunWatcher](f.r),
		"CommitObserver": is[store.CommitObserver](f.r),
		"ForeignCommits": is[store.ForeignCommits](f.r),
		"Ready":          is[interface{ Ready(context.Context) error }](f.r),
	} {
		if !ok {
			t.Errorf("a router of SQLite stores is not a %s", name)
		}
	}
	if is[store.TxStarter](f.r) || is[store.TxCheckpointer](f.r) {
		t.Error("a router offers a transaction of one database")
	}
	if err := f.r.(interface{ Ready(context.Context) error }).Ready(f.ctx); err != nil {
		t.Errorf("Ready: %v", err)
	}
	f.create(t, f.r, "orders", "o1", nil)
	counts, err := f.r.(store.RunCounter).RunCounts(f.ctx, &store.RunCountsParams{Namespace: "orders"})
	if err != nil || counts.Counts[store.StatusPending] != 1 {
		t.Errorf("RunCounts(orders) = %+v, %v; want 1 pending", counts, err)
	}
	batches := make(chan int, 100)
	stop := f.r.(store.CommitObserver).ObserveCommits(func(n int, _ time.Duration) { batches <- n })
	defer stop()
	f.create(t, f.r, "orders", "o2", nil)
	f.create(t, f.r, "default", "d1", nil)
	for range 2 {
		select {
		case <-batches:
		case <-time.After(5 * time.Second):
			t.Fatal("the commits of two stores were not both observed")
		}
	}
}

func is[T any](v any) bool { _, ok := v.(T); return ok }

// TestForeignCommitMarkSeesEveryStore: the router's mark changes when another
// process commits to any of its stores, and not for its own commits.
func TestForeignCommitMarkSeesEveryStore(t *testing.T) {
	t.Parallel()
	clk := storetest.NewClock(t0)
	dir := t.TempDir()
	open := func(name string) *storesqlite.Store {
		s, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: dir + "/" + name, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	r := route(t, open("control.db"), map[string]store.Store{"orders": open("orders.db")})
	other := open("orders.db") // another Store on the routed file: a foreign writer
	fc := r.(store.ForeignCommits)
	ctx := t.Context()
	mark := func() int64 {
		t.Helper()
		m, err := fc.ForeignCommitMark(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	create := func(st store.Store, ns, id string) {
		t.Helper()
		if _, err := st.RunCreate(ctx, &store.RunCreateParams{Namespace: ns, ID: id, WorkflowID: id, Workflow: "wf", Queue: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	m0 := mark()
	create(r, "orders", "own")
	create(r, "default", "own")
	// A SQLite store hands out a reading of its mark again for 100 ms (wall
	// clock): wait past that for a fresh one.
	time.Sleep(250 * time.Millisecond)
	if m := mark(); m != m0 {
		t.Errorf("mark after the router's own commits = %d, want %d", m, m0)
	}
	create(other, "orders", "foreign")
	deadline := time.Now().Add(5 * time.Second)
	for mark() == m0 {
		if time.Now().After(deadline) {
			t.Fatalf("mark after another Store's commit to the routed file is still %d", m0)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
