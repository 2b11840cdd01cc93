package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var batchCases = []testCase{
	{"CreatesAll", batchCreatesAll},
	{"PerItemReuse", batchPerItemReuse},
	{"InvalidWritesNothing", batchInvalidWritesNothing},
	{"Idempotency", batchIdempotency},
	{"Claimable", batchClaimable},
	{"Claimed", batchClaimed},
	{"ClaimIgnored", batchClaimIgnored},
	{"TraceParent", batchTraceParent},
}

func (e *env) batch(runs ...*store.RunCreateParams) *store.RunsCreateResult {
	e.t.Helper()
	res, err := e.st.RunsCreate(e.ctx, &store.RunsCreateParams{Namespace: ns, Runs: runs})
	if err != nil {
		e.t.Fatalf("RunsCreate: %v", err)
	}
	if len(res.Items) != len(runs) {
		e.t.Fatalf("RunsCreate returned %d items for %d runs", len(res.Items), len(runs))
	}
	return res
}

// batchCreatesAll creates a full batch: every run pending, in order, with its
// sequence, readable.
func batchCreatesAll(t *testing.T, e *env) {
	now := e.clk.Advance(time.Second)
	var runs []*store.RunCreateParams
	for range store.MaxBatchRuns {
		p := e.params()
		p.Input = []byte(`{"n":1}`)
		runs = append(runs, p)
	}
	res := e.batch(runs...)
	var last int64
	for i, it := range res.Items {
		if !it.Created || it.Err != nil || it.Run == nil || it.Run.ID != runs[i].ID || it.Run.Status != store.StatusPending {
			t.Fatalf("item %d = %+v", i, it)
		}
		if it.Run.Sequence <= last {
			t.Fatalf("item %d sequence %d after %d", i, it.Run.Sequence, last)
		}
		last = it.Run.Sequence
	}
	got := e.get(runs[999].ID)
	if got.Status != store.StatusPending || string(got.Input) != `{"n":1}` || got.Sequence != res.Items[999].Run.Sequence {
		t.Fatalf("stored run %+v", got)
	}
	wantTime(t, "CreatedAt", got.CreatedAt, now)
}

// batchPerItemReuse gives each item its own reuse outcome, the batch's earlier
// items included; the others are created.
func batchPerItemReuse(t *testing.T, e *env) {
	done := e.start(withWorkflowID("done"))
	e.finish(done)
	active := e.create(withWorkflowID("active"))
	res := e.batch(
		e.params(withWorkflowID("active")),                                       // 0 rejected: active run
		e.params(withWorkflowID("active"), withReuse(store.ReuseReturnExisting)), // 1 the active run
		e.params(withWorkflowID("done")),                                         // 2 created: finished
		e.params(withWorkflowID("done"), withReuse(store.ReuseReject)),           // 3 rejected: run 2 exists
		e.params(withWorkflowID("fresh")),                                        // 4 created
		e.params(withWorkflowID("fresh")),                                        // 5 rejected: item 4
		e.params(withWorkflowID("fresh"), withReuse(store.ReuseReturnExisting)),  // 6 item 4's run
	)
	it := res.Items
	for _, i := range []int{0, 3, 5} {
		if !errors.Is(it[i].Err, store.ErrRunExists) || it[i].Created {
			t.Fatalf("item %d = %+v, want ErrRunExists", i, it[i])
		}
	}
	if it[1].Created || it[1].Err != nil || it[1].Run.ID != active.ID {
		t.Fatalf("item 1 = %+v, want the active run", it[1])
	}
	if !it[2].Created || !it[4].Created {
		t.Fatalf("items 2 and 4 = %+v %+v, want created", it[2], it[4])
	}
	if it[6].Created || it[6].Run.ID != it[4].Run.ID {
		t.Fatalf("item 6 = %+v, want item 4's run", it[6])
	}
	ids := e.listIDs(store.RunListParams{Namespace: ns, Limit: 100})
	if len(ids) != 4 { // active, done, item 2, item 4
		t.Fatalf("%d runs stored, want 4: %v", len(ids), ids)
	}
}

// batchInvalidWritesNothing: bad input fails the whole batch and writes nothing.
func batchInvalidWritesNothing(t *testing.T, e *env) {
	good := e.params()
	dup := e.params()
	tooMany := make([]*store.RunCreateParams, store.MaxBatchRuns+1)
	for i := range tooMany {
		tooMany[i] = e.params()
	}
	noWorkflow := e.params()
	noWorkflow.Workflow = ""
	badClaim := e.params()
	badClaim.Claim = &store.CreateClaim{Worker: "w"}
	for name, p := range map[string]*store.RunsCreateParams{
		"empty":        {Namespace: ns},
		"no namespace": {Runs: []*store.RunCreateParams{e.params()}},
		"too many":     {Namespace: ns, Runs: tooMany},
		"repeated ID":  {Namespace: ns, Runs: []*store.RunCreateParams{good, dup, e.params(withID(dup.ID))}},
		"bad item":     {Namespace: ns, Runs: []*store.RunCreateParams{good, noWorkflow}},
		"bad claim":    {Namespace: ns, Runs: []*store.RunCreateParams{good, badClaim}},
		"other ns":     {Namespace: ns, Runs: []*store.RunCreateParams{good, e.params(withNamespace("other"))}},
	} {
		if _, err := e.st.RunsCreate(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) {
			t.Fatalf("%s: RunsCreate = %v, want ErrInvalidParams", name, err)
		}
	}
	if ids := e.listIDs(store.RunListParams{Namespace: ns}); len(ids) != 0 {
		t.Fatalf("runs stored after invalid batches: %v", ids)
	}
}

// batchIdempotency records one key with the batch: a second call with it
// creates nothing.
func batchIdempotency(t *testing.T, e *env) {
	rec := rendered("k", []byte("fp"), "storetest.batch")
	p := &store.RunsCreateParams{Namespace: ns, Runs: []*store.RunCreateParams{e.params(), e.params()}, Idempotency: rec}
	if _, err := e.st.RunsCreate(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	entry, err := e.idemGet(ns, "k")
	if err != nil || entry.Status != 200 || string(entry.Body) != "2" {
		t.Fatalf("entry %+v, %v", entry, err)
	}
	p2 := &store.RunsCreateParams{Namespace: ns, Runs: []*store.RunCreateParams{e.params()}, Idempotency: rec}
	if _, err := e.st.RunsCreate(e.ctx, p2); !errors.Is(err, store.ErrIdempotencyKeyUsed) {
		t.Fatalf("second RunsCreate = %v, want ErrIdempotencyKeyUsed", err)
	}
	if ids := e.listIDs(store.RunListParams{Namespace: ns}); len(ids) != 2 {
		t.Fatalf("runs stored: %v, want 2", ids)
	}
}

// batchClaimable: the runs of a batch are claimed in claim order like others.
func batchClaimable(t *testing.T, e *env) {
	sub := e.subscribe(store.TopicReady)
	res := e.batch(e.params(), e.params(withPriority(5)), e.params())
	wantSignal(t, "TopicReady after RunsCreate", sub)
	got := e.claimIDs(claimMax(10))
	want := []string{res.Items[1].Run.ID, res.Items[0].Run.ID, res.Items[2].Run.ID}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
}

// batchClaimed creates the items with a Claim already claimed, as RunCreate
// does: running, attempt 1, leased, each with a working token; the other items
// stay pending for an ordinary claim, which takes only them.
func batchClaimed(t *testing.T, e *env) {
	now := e.clk.Advance(time.Second)
	plain := e.params()
	res := e.batch(e.params(withClaim("local")), plain, e.params(withClaim("local")))
	for _, i := range []int{0, 2} {
		it := res.Items[i]
		cr := it.Claimed
		if !it.Created || it.Err != nil || cr == nil || cr.Run != it.Run || cr.LeaseToken == 0 || cr.History == nil || len(cr.History) != 0 {
			t.Fatalf("item %d = %+v, want a created run with its lease and empty history", i, it)
		}
		wantTime(t, "LeaseExpiresAt", cr.LeaseExpiresAt, now.Add(leaseDur))
		for _, got := range []*store.Run{it.Run, e.get(it.Run.ID)} {
			if got.Status != store.StatusRunning || got.Attempts != 1 || got.LeaseOwner != "local" || got.StartedAt == nil {
				t.Fatalf("claimed item %d = %+v, want running, attempt 1, leased by local, started", i, got)
			}
			wantTimePtr(t, "Run.LeaseExpiresAt", got.LeaseExpiresAt, now.Add(leaseDur))
			wantTime(t, "Run.StartedAt", *got.StartedAt, now)
		}
	}
	if it := res.Items[1]; it.Claimed != nil || it.Run.Status != store.StatusPending {
		t.Fatalf("item without a claim = %+v, want pending, not claimed", it)
	}
	wantIDs(t, "RunsClaim after the batch", e.claimIDs(claimMax(10)), []string{plain.ID})
	e.finish(res.Items[0].Claimed)
	e.finish(res.Items[2].Claimed)
	e.wantStatus(res.Items[0].Run.ID, store.StatusSucceeded)
	e.wantStatus(res.Items[2].Run.ID, store.StatusSucceeded)
}

// batchClaimIgnored: as with RunCreate, no claim for an existing run that
// ReuseReturnExisting returns, for a run not yet available, nor for a run in a
// queue that limits claims (it waits for an ordinary claim, which respects the
// limits); a claimed run of another queue of the same batch is unaffected.
func batchClaimIgnored(t *testing.T, e *env) {
	first := e.create(withWorkflowID("k"))
	e.mkNamespace(ns)
	e.mkQueue(store.QueueCreateParams{Paused: true})
	later := e.clk.Now().Add(time.Minute)
	limited := e.params(withClaim("local"))
	res := e.batch(e.params(withWorkflowID("k"), withReuse(store.ReuseReturnExisting), withClaim("local")),
		e.params(withAvailableAt(later), withClaim("local")), limited,
		e.params(withQueue("other"), withClaim("local")))
	if it := res.Items[0]; it.Created || it.Claimed != nil || it.Run.ID != first.ID {
		t.Fatalf("item returning the existing run = %+v, want run %s, not created, not claimed", it, first.ID)
	}
	e.wantStatus(first.ID, store.StatusPending)
	for _, i := range []int{1, 2} {
		if it := res.Items[i]; !it.Created || it.Claimed != nil || it.Run.Status != store.StatusPending {
			t.Fatalf("item %d = %+v, want a pending run, not claimed", i, it)
		}
		e.wantStatus(res.Items[i].Run.ID, store.StatusPending)
	}
	if it := res.Items[3]; it.Claimed == nil || it.Run.Status != store.StatusRunning {
		t.Fatalf("item in an unlimited queue = %+v, want it claimed", it)
	}
	e.setPaused(false)
	wantIDs(t, "RunsClaim once the queue is resumed", e.claimIDs(claimMax(10)), []string{first.ID, limited.ID})
}

// batchTraceParent stores each item's trace context as RunCreate does: it comes
// back with the item, when the run is read and when it is claimed.
func batchTraceParent(t *testing.T, e *env) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traced := e.params(func(p *store.RunCreateParams) { p.TraceParent = tp })
	res := e.batch(traced, e.params())
	if got := res.Items[0].Run.TraceParent; got != tp {
		t.Fatalf("item 0: TraceParent = %q, want %q", got, tp)
	}
	if got := e.get(traced.ID).TraceParent; got != tp {
		t.Fatalf("stored run: TraceParent = %q, want %q", got, tp)
	}
	if got := e.get(res.Items[1].Run.ID).TraceParent; got != "" {
		t.Fatalf("untraced item: TraceParent = %q, want none", got)
	}
	claimed, err := e.st.RunsClaim(e.ctx, &store.RunsClaimParams{Namespace: traced.Namespace, Workflows: []string{traced.Workflow},
		Worker: "w", Max: 2, LeaseDuration: leaseDur})
	if err != nil || len(claimed.Runs) != 2 {
		t.Fatalf("RunsClaim = %+v, %v; want both runs", claimed, err)
	}
	for _, cr := range claimed.Runs {
		want := ""
		if cr.Run.ID == traced.ID {
			want = tp
		}
		if cr.Run.TraceParent != want {
			t.Fatalf("claimed run %s: TraceParent = %q, want %q", cr.Run.ID, cr.Run.TraceParent, want)
		}
	}
}
