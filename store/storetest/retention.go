package storetest

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var retentionCases = []testCase{
	{"DeleteEverything", retentionDeleteEverything},
	{"DeleteActiveRefused", retentionDeleteActive},
	{"DeleteUnknown", retentionDeleteUnknown},
	{"DeleteParentKeepsChildren", retentionDeleteParent},
	{"PurgeExpiredOnly", retentionPurgeExpired},
	{"PurgePastLongRuns", retentionPurgePastLongRuns},
	{"PurgePastAPageOfLongRuns", retentionPurgePastPage},
	{"PurgeConcurrently", retentionPurgeConcurrently},
	{"PurgeBadInput", retentionPurgeBadInput},
	{"Namespaces", retentionNamespaces},
}

// fullRun makes a finished run with a row in every table that belongs to a run:
// ops, attempts, a value, an unconsumed event, an approval, and an idempotency
// key naming it.
func (e *env) fullRun() *store.Run {
	e.t.Helper()
	p := e.params()
	p.Idempotency = idemRecord(e.newID("key"), p.ID)
	if _, err := e.st.RunCreate(e.ctx, p); err != nil {
		e.t.Fatalf("RunCreate: %v", err)
	}
	cr := e.claimOne(p.ID)
	step := e.doneStep(1, "s", `1`)
	step.Attempts = 2
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event", WaitEvents: []string{"go"},
		Ops:       []*store.Op{e.doneStep(0, "a", `0`), step},
		Attempts:  []store.Attempt{{Position: 1, Attempt: 1, Error: store.ErrorInfo{Message: "boom"}, StartedAt: e.clk.Now(), FinishedAt: e.clk.Now()}},
		KV:        []store.KVWrite{{Key: "k", Value: []byte(`"v"`)}},
		Approvals: []*store.ApprovalRequest{{ID: e.newID("appr"), Position: 2, Name: "ok"}},
	})
	e.send(p.ID, "other", `1`) // stays unconsumed
	e.send(p.ID, "go", `2`)
	cr = e.claimOne(p.ID)
	e.finish(cr)
	return e.get(p.ID)
}

// wantGone checks that nothing of run id is readable any more.
func (e *env) wantGone(r *store.Run, idemKey string) {
	e.t.Helper()
	if _, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: r.ID}); !errors.Is(err, store.ErrRunNotFound) {
		e.t.Fatalf("RunGet after delete = %v, want ErrRunNotFound", err)
	}
	if _, err := e.st.HistoryList(e.ctx, &store.HistoryListParams{Namespace: ns, Ref: r.ID}); !errors.Is(err, store.ErrRunNotFound) {
		e.t.Fatalf("HistoryList after delete = %v, want ErrRunNotFound", err)
	}
	if _, err := e.kvGet(r.ID, "k"); !errors.Is(err, store.ErrRunNotFound) {
		e.t.Fatalf("KVGet after delete = %v, want ErrRunNotFound", err)
	}
	if idemKey != "" {
		if _, err := e.idemGet(ns, idemKey); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
			e.t.Fatalf("IdempotencyGet after delete = %v, want ErrIdempotencyKeyNotFound", err)
		}
	}
	appr, err := e.st.ApprovalList(e.ctx, &store.ApprovalListParams{Namespace: ns})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range appr.Approvals {
		if a.RunID == r.ID {
			e.t.Fatalf("approval %s of the deleted run is still listed", a.ID)
		}
	}
}

func retentionDeleteEverything(t *testing.T, e *env) {
	keep := e.fullRun()
	r := e.fullRun()
	keepHist := e.history(keep.ID)
	sub := e.subscribe(store.RunTopic(ns, r.ID))
	got, err := e.st.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns, Ref: r.ID})
	if err != nil {
		t.Fatalf("RunDelete: %v", err)
	}
	if got.ID != r.ID || got.Status != store.StatusSucceeded {
		t.Fatalf("RunDelete returned %+v", got)
	}
	wantSignal(t, "run topic after RunDelete", sub)
	e.wantGone(r, "")
	// The other run is whole.
	if h := e.history(keep.ID); len(h) != len(keepHist) || len(h[1].AttemptLog) != 1 {
		t.Fatalf("history of the kept run = %+v", h)
	}
	e.wantKV(keep.ID, "k", `"v"`)
	// Deleting again: gone.
	if _, err := e.st.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns, Ref: r.ID}); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("second RunDelete = %v, want ErrRunNotFound", err)
	}
}

func retentionDeleteActive(t *testing.T, e *env) {
	running := e.start()
	pending := e.create()
	for _, id := range []string{pending.ID, running.Run.ID} {
		_, err := e.st.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns, Ref: id})
		if !errors.Is(err, store.ErrRunActive) {
			t.Fatalf("RunDelete of an active run = %v, want ErrRunActive", err)
		}
	}
	e.wantStatus(pending.ID, store.StatusPending)
	e.wantStatus(running.Run.ID, store.StatusRunning)
	e.finish(running) // its lease still works
}

func retentionDeleteUnknown(t *testing.T, e *env) {
	for _, p := range []store.RunDeleteParams{{Namespace: ns, Ref: "nope"}, {Namespace: "other", Ref: "nope"}} {
		if _, err := e.st.RunDelete(e.ctx, &p); !errors.Is(err, store.ErrRunNotFound) {
			t.Fatalf("RunDelete(%+v) = %v, want ErrRunNotFound", p, err)
		}
	}
	if _, err := e.st.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns}); !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("RunDelete without Ref = %v, want ErrInvalidParams", err)
	}
}

// retentionDeleteParent deletes a finished parent whose detached child still
// runs: the child stays and can finish.
func retentionDeleteParent(t *testing.T, e *env) {
	parent := e.start()
	g := e.group(0, 1, e.newID("child"))
	g.Detached = true
	e.checkpoint(parent, store.CheckpointParams{Status: store.StatusRunning, Children: []*store.ChildGroup{g},
		Ops: []*store.Op{{Position: 0, Kind: store.OpChild, Name: "c", StartedAt: e.clk.Now()}}})
	e.finish(parent)
	child := e.claimOne(g.Runs[0].ID, claimWorkflows(childWF))
	if _, err := e.st.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns, Ref: parent.Run.ID}); err != nil {
		t.Fatalf("RunDelete of the parent: %v", err)
	}
	e.finish(child)
	e.wantStatus(child.Run.ID, store.StatusSucceeded)
}

func retentionPurgeExpired(t *testing.T, e *env) {
	var old []string
	for range 5 {
		cr := e.start()
		e.finish(cr)
		old = append(old, cr.Run.ID)
	}
	other := e.claimOne(e.create(withNamespace("other")).ID, claimIn("other"))
	e.finish(other)
	cutoff := e.clk.Advance(time.Hour)
	e.clk.Advance(time.Second)
	fresh := e.start()
	e.finish(fresh)
	active := e.create()
	n, err := e.st.RunsPurge(e.ctx, &store.RunsPurgeParams{Namespace: ns, FinishedBefore: cutoff, Limit: 3})
	if err != nil || n != 3 {
		t.Fatalf("RunsPurge = %d, %v; want 3", n, err)
	}
	n, err = e.st.RunsPurge(e.ctx, &store.RunsPurgeParams{Namespace: ns, FinishedBefore: cutoff, Limit: 3})
	if err != nil || n != 2 {
		t.Fatalf("second RunsPurge = %d, %v; want 2", n, err)
	}
	n, err = e.st.RunsPurge(e.ctx, &store.RunsPurgeParams{Namespace: ns, FinishedBefore: cutoff})
	if err != nil || n != 0 {
		t.Fatalf("third RunsPurge = %d, %v; want 0", n, err)
	}
	for _, id := range old {
		e.wantNoRun(id)
	}
	ids := e.listIDs(store.RunListParams{Namespace: ns})
	slices.Sort(ids)
	want := []string{active.ID, fresh.Run.ID}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("runs left %v, want %v", ids, want)
	}
	e.getIn("other", other.Run.ID)
}

// retentionPurgePastLongRuns purges runs of every finished status that
// expired, created after runs that are kept: runs that started before the
// cutoff and finished after it, and a run still going.
func retentionPurgePastLongRuns(t *testing.T, e *env) {
	long := []*store.ClaimedRun{e.start(), e.start()}
	var expired []string
	for _, status := range []store.Status{store.StatusSucceeded, store.StatusFailed, store.StatusSucceeded} {
		cr := e.start()
		e.end(cr, status)
		expired = append(expired, cr.Run.ID)
	}
	cancelled := e.create()
	e.cancel(cancelled.ID)
	expired = append(expired, cancelled.ID)
	pending := e.create()
	cutoff := e.clk.Advance(time.Hour)
	e.clk.Advance(time.Second)
	e.finish(long[0])
	e.end(long[1], store.StatusFailed)
	going := e.claimOne(pending.ID)
	fresh := e.start()
	e.finish(fresh)
	n, err := e.st.RunsPurge(e.ctx, &store.RunsPurgeParams{Namespace: ns, FinishedBefore: cutoff})
	if err != nil || n != len(expired) {
		t.Fatalf("RunsPurge = %d, %v; want %d", n, err, len(expired))
	}
	for _, id := range expired {
		e.wantNoRun(id)
	}
	ids := e.listIDs(store.RunListParams{Namespace: ns})
	slices.Sort(ids)
	want := []string{long[0].Run.ID, long[1].Run.ID, going.Run.ID, fresh.Run.ID}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("runs left %v, want %v", ids, want)
	}
	e.finish(going)
}

// startMany creates n runs and claims them; no other run may be due.
func (e *env) startMany(n int) []*store.ClaimedRun {
	e.t.Helper()
	for range n {
		e.create()
	}
	var crs []*store.ClaimedRun
	for len(crs) < n {
		crs = append(crs, e.claim().Runs...)
	}
	return crs
}

// retentionPurgePastPage purges an expired run created after more runs that
// are kept than a purge reads at once.
func retentionPurgePastPage(t *testing.T, e *env) {
	const kept = 510
	long := e.startMany(kept)
	expired := e.start()
	e.finish(expired)
	cutoff := e.clk.Advance(time.Hour)
	e.clk.Advance(time.Second)
	for _, cr := range long {
		e.finish(cr)
	}
	n, err := e.st.RunsPurge(e.ctx, &store.RunsPurgeParams{Namespace: ns, FinishedBefore: cutoff, Limit: 10})
	if err != nil || n != 1 {
		t.Fatalf("RunsPurge = %d, %v; want 1", n, err)
	}
	e.wantNoRun(expired.Run.ID)
	if got := len(e.listIDs(store.RunListParams{Namespace: ns, Limit: 1000})); got != kept {
		t.Fatalf("%d runs left, want %d", got, kept)
	}
}

// retentionPurgeConcurrently purges from four callers at once, as several
// processes' purgers may: each run is deleted once and counted once.
func retentionPurgeConcurrently(t *testing.T, e *env) {
	const expired = 120
	for _, cr := range e.startMany(expired) {
		e.finish(cr)
	}
	cutoff := e.clk.Advance(time.Hour)
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				n, err := e.st.RunsPurge(e.ctx, &store.RunsPurgeParams{Namespace: ns, FinishedBefore: cutoff, Limit: 10})
				if err != nil {
					errs <- err
					return
				}
				total.Add(int64(n))
				if n < 10 {
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("RunsPurge: %v", err)
	}
	if got := total.Load(); got != expired {
		t.Fatalf("the purges counted %d runs deleted, want %d", got, expired)
	}
	if ids := e.listIDs(store.RunListParams{Namespace: ns}); len(ids) != 0 {
		t.Fatalf("runs left: %v", ids)
	}
}

func retentionPurgeBadInput(t *testing.T, e *env) {
	cr := e.start()
	e.finish(cr)
	for _, p := range []store.RunsPurgeParams{
		{FinishedBefore: e.clk.Now().Add(time.Hour)},
		{Namespace: ns},
		{Namespace: ns, FinishedBefore: e.clk.Now().Add(time.Hour), Limit: -1},
		{Namespace: ns, FinishedBefore: e.clk.Now().Add(time.Hour), Limit: store.MaxPurgeBatch + 1},
	} {
		if _, err := e.st.RunsPurge(e.ctx, &p); !errors.Is(err, store.ErrInvalidParams) {
			t.Fatalf("RunsPurge(%+v) = %v, want ErrInvalidParams", p, err)
		}
	}
	e.wantStatus(cr.Run.ID, store.StatusSucceeded)
}

func retentionNamespaces(t *testing.T, e *env) {
	got, err := e.st.RunNamespaces(e.ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("RunNamespaces of an empty store = %v, %v", got, err)
	}
	e.create(withNamespace("b"))
	e.create(withNamespace("a"))
	e.create(withNamespace("b"))
	got, err = e.st.RunNamespaces(e.ctx)
	if err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("RunNamespaces = %v, %v; want [a b]", got, err)
	}
}
